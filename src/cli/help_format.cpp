#include "cli/help_format.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>

#include "util/terminal.h"

namespace swavg {
namespace {

constexpr size_t kNameColumn = 30;
constexpr size_t kMinWidth = 40;

class help_formatter final : public CLI::Formatter {
 public:
  help_formatter() { column_width(kNameColumn); }

  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    return row(make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
  }

  std::string make_subcommand(const CLI::App* sub) const override {
    return row(sub->get_display_name(true), sub->get_description());
  }

  // The option's value (TEXT, {a,b}); what it needs or excludes goes to its description.
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    std::string out;
    if (opt->get_type_size() != 0 && opt->get_expected_max() != 0) {
      if (!opt->get_type_name().empty()) out += " " + get_label(opt->get_type_name());
      if (!opt->get_default_str().empty()) out += "=" + opt->get_default_str();
      if (opt->get_required()) out += " " + get_label("REQUIRED");
    }
    return out;
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string desc = opt->get_description();
    const auto names = [](const std::set<CLI::Option*>& options) {
      std::string list;
      for (const CLI::Option* o : options) list += (list.empty() ? "" : ", ") + o->get_name();
      return list;
    };
    if (!opt->get_needs().empty()) desc += " (needs " + names(opt->get_needs()) + ")";
    if (!opt->get_excludes().empty()) desc += " (not with " + names(opt->get_excludes()) + ")";
    if (!opt->get_envname().empty()) desc += " (environment: " + opt->get_envname() + ")";
    return desc;
  }

  std::string make_description(const CLI::App* app) const override {
    return wrap_words(CLI::Formatter::make_description(app), width() - 1, 0);
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string path = app->get_name();
    for (const CLI::App* at = app->get_parent(); at != nullptr; at = at->get_parent())
      path = at->get_name() + " " + path;
    return CLI::Formatter::make_usage(app, app->get_parent() == nullptr ? app->get_name() : path);
  }

 private:
  // "  NAME                        description wrapped under its column"
  std::string row(std::string name, const std::string& desc) const {
    name = "  " + name;
    if (desc.empty()) return name + "\n";
    std::string out = name;
    if (name.size() >= kNameColumn)
      out += "\n" + std::string(kNameColumn, ' ');
    else
      out += std::string(kNameColumn - name.size(), ' ');
    return out + wrap_words(desc, width() - 1 - kNameColumn, kNameColumn) + "\n";
  }

  static size_t width() { return std::max<size_t>(static_cast<size_t>(terminal_columns(STDOUT_FILENO)), kMinWidth); }
};

void set_formatter(CLI::App& app, const std::shared_ptr<help_formatter>& f) {
  app.formatter(f);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) set_formatter(*sub, f);
}

}  // namespace

std::string wrap_words(const std::string& text, size_t width, size_t indent) {
  width = std::max<size_t>(width, 20);
  std::string out;
  size_t column = 0;
  for (size_t start = 0; start <= text.size();) {
    const size_t stop = std::min(text.find_first_of(" \n", start), text.size());
    const std::string word = text.substr(start, stop - start);
    if (!word.empty()) {
      if (column > 0 && column + 1 + word.size() > width) {
        out += "\n" + std::string(indent, ' ');
        column = 0;
      } else if (column > 0) {
        out += ' ';
        ++column;
      }
      out += word;
      column += word.size();
    }
    if (stop < text.size() && text[stop] == '\n') {
      out += "\n" + std::string(indent, ' ');
      column = 0;
    }
    start = stop + 1;
  }
  return out;
}

void use_help_format(CLI::App& app) {
  app.name("swavg");
  set_formatter(app, std::make_shared<help_formatter>());
}

}  // namespace swavg

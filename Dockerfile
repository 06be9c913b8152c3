# Build stage: the same packages and commands as the README's set-up; the tests run here.
FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN bash scripts/setup.sh && ctest --test-dir build --output-on-failure

# Final stage: the swavg binaries (swavg-torch beside swavg) and the LibTorch runtime only.
FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libtorch1.13 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/swavg /src/build/swavg-torch /usr/local/bin/
ENTRYPOINT ["swavg"]

# The lean image: swavg's Debian package (a build against Debian's LibTorch 1.13, CPU) on Debian 12,
# its Depends (libtorch1.13 and the rest) installed by apt. The build context is a folder holding
# the swavg_*.deb that scripts/build_deb.sh makes; scripts/build_image.sh builds it with podman
# from a debootstrapped debian:12:
#   scripts/build_image.sh lean                      # localhost/swavg:lean
#   docker build -f Dockerfile DIR                   # elsewhere: DIR holds the swavg_*.deb alone
FROM debian:12
COPY swavg_*.deb /tmp/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/swavg_*.deb \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /tmp/swavg_*.deb \
 && swavg --version
WORKDIR /work
ENTRYPOINT ["swavg"]

# Shared by scripts/bootstrap, scripts/test and .ci/run. Source it; do not run it.

# Debian packages CamRig builds with, and all that `camrig demo` needs (scripts/bootstrap installs these only).
CAMRIG_BUILD_PACKAGES=(
    libv4l-dev        # V4L2 cameras through libv4l2
    zlib1g-dev        # PNG output of captured frames
    libturbojpeg0-dev # JPEG photos, encoded on the agent
    libsqlite3-dev    # the capture catalog (GRDB)
    libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # on-host recordings: Matroska files through FFmpeg's libraries
    gcc libc6-dev pkg-config  # C headers and the system libraries' flags for the C targets
    ca-certificates
    git               # SwiftPM fetches the packages
)

# What the tests need besides (scripts/test installs both lists).
CAMRIG_TEST_PACKAGES=(
    libraw-bin        # LibRaw's raw-identify and dcraw_emu: the tests read CamRig's DNG files with them
    ffmpeg            # ffprobe and ffmpeg: the tests read the recorded files with FFmpeg's own tools
    v4l-utils         # v4l2-ctl, v4l2-compliance
    protobuf-compiler # protoc, to regenerate proto/ and for the interoperability test
    python3-protobuf  # the interoperability test's independent Python client
    iproute2          # network namespaces for multi-host tests and camrig-bench sync
    chrony            # camrig-bench sync's baseline (run with -x: it never adjusts the clock)
    openssl           # camrig-bench throughput's TLS baseline (s_server/s_client)
    make              # the emulated V4L2 device (Tests/V4L2Emulator)
    chromium chromium-driver  # the web console's browser test (headless, driven by Selenium)
    dpkg-dev binutils lintian # scripts/package: dpkg-shlibdeps, dpkg-gencontrol, strip; lintian on the packages
    debootstrap systemd       # scripts/test-packages: a Debian 12 root to install them in; systemd-analyze verify
    swift swift-proxy swift-account swift-container swift-object  # scripts/object-store: OpenStack Swift with s3api, a real S3 API on loopback
    postgresql-15             # scripts/postgres: a PostgreSQL 15 server on loopback (no default cluster: see install_system_packages)
)

# Python packages the tests use beyond Debian's, as PACKAGE:MODULE: Selenium drives Debian's
# chromium-driver in the console's browser test; openapi-spec-validator checks the service's OpenAPI
# document; prometheus-client parses /metrics; PyYAML reads the OpenAPI document; boto3 is the upload
# benchmark's baseline (scripts/s3-put-baseline) against scripts/object-store.
CAMRIG_PYTHON_PACKAGES=(selenium:selenium openapi-spec-validator:openapi_spec_validator prometheus-client:prometheus_client pyyaml:yaml schemathesis:schemathesis boto3:boto3)

install_python_packages() {
    local missing=()
    for entry in "${CAMRIG_PYTHON_PACKAGES[@]}"; do
        python3 -c "import ${entry#*:}" 2>/dev/null || missing+=("${entry%%:*}")
    done
    [ ${#missing[@]} -eq 0 ] && return
    echo "installing Python packages: ${missing[*]}" >&2
    python3 -m pip install -q "${missing[@]}" 2>&1 | grep -v "WARNING: Running pip as the 'root' user" >&2 || true
}

# Installs those of the packages named that are missing (apt-get update only when something is).
install_system_packages() {
    local missing=()
    for package in "$@"; do
        dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        echo "system packages: all present" >&2
        return
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
        sudo="sudo"
    fi
    echo "installing: ${missing[*]}" >&2
    # Debian's postgresql-15 would make a cluster "main" on port 5432 and start it: the tests start their own
    # servers (scripts/postgres), so the machine gets none. Its postinst reads this before making one.
    if printf '%s\n' "${missing[@]}" | grep -q '^postgresql'; then
        $sudo mkdir -p /etc/postgresql-common
        if [ -f /etc/postgresql-common/createcluster.conf ]; then
            $sudo sed -i '/^[[:space:]]*create_main_cluster[[:space:]]*=/d' /etc/postgresql-common/createcluster.conf
        fi
        echo "create_main_cluster = false" | $sudo tee -a /etc/postgresql-common/createcluster.conf >/dev/null
    fi
    # No package's service is started by its installation (PostgreSQL, rsyslog, Swift's daemons): a
    # policy-rc.d that refuses every start, unless the machine has one of its own, for the install only.
    local policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\n# scripts/lib.sh: no service starts while CamRig installs its packages\nexit 101\n' | $sudo tee "$policy" >/dev/null
        $sudo chmod 0755 "$policy"
    fi
    local status=0
    $sudo apt-get update -qq || status=$?
    if [ "$status" -eq 0 ]; then
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null || status=$?
    fi
    [ -z "$policy" ] || $sudo rm -f "$policy"
    return "$status"
}

# Builds the emulated V4L2 camera (a libv4l2 plugin) and installs it where libv4l2 loads plugins, so
# the V4L2 backend's tests have a device on machines without cameras.
install_v4l2_emulator() {
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    make -s -C Tests/V4L2Emulator all
    $sudo make -s -C Tests/V4L2Emulator install
}

# Puts Swift on PATH (it lives in /opt/swift on CamRig's build machines) or explains how to get it.
ensure_swift() {
    if ! command -v swift >/dev/null; then
        for dir in /opt/swift/usr/bin /opt/swift/bin /usr/share/swift/usr/bin; do
            [ -x "$dir/swift" ] && export PATH="$dir:$PATH" && break
        done
    fi
    command -v swift >/dev/null || {
        echo "Swift 6 is needed: install a Swift 6.x toolchain for Debian 12 from https://swift.org/install and put it on PATH" >&2
        exit 1
    }
}

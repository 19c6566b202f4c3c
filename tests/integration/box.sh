#!/bin/bash
# Run a command inside a private, boxed systemd user manager (../shared/TESTING.md).
# PID 1 on these machines is not systemd: a user manager started in the root
# cgroup would adopt every process into its init.scope, so it only ever runs
# inside its own cgroup, cgroup namespace, mount namespace and PID namespace.
#
# usage: box.sh COMMAND [ARGS...]   (as root)
# Inside COMMAND: XDG_RUNTIME_DIR, HOME, DBUS_SESSION_BUS_ADDRESS point into the box,
# and MODELGATE_BOX=<dir> names the box's directory on the real filesystem.
set -eu

if [ "${1:-}" = "--inside" ]; then
        shift
        box=$MODELGATE_BOX
        mount -t tmpfs tmpfs /sys/fs/cgroup
        mkdir /sys/fs/cgroup/unified /sys/fs/cgroup/systemd
        mount -t cgroup2 none /sys/fs/cgroup/unified
        mount -t cgroup -o none,name=systemd none /sys/fs/cgroup/systemd
        mount -t tmpfs tmpfs /run/systemd
        mkdir -p /run/systemd/system
        export XDG_RUNTIME_DIR=$box/xdg HOME=$box/home
        export DBUS_SESSION_BUS_ADDRESS=unix:path=$XDG_RUNTIME_DIR/bus
        unset XDG_CONFIG_HOME XDG_STATE_HOME XDG_DATA_HOME
        # The user bus reads a configuration of the box's own, whose one service directory is the box's
        # ($XDG_RUNTIME_DIR/dbus-1/services): with Debian's session.conf it would read the machine's too,
        # and an org.modelgate1 activation file installed under /usr/local would start that modelgated.
        mkdir -p "$XDG_RUNTIME_DIR/dbus-1/services" "$XDG_RUNTIME_DIR/systemd/user/dbus.service.d"
        cat >"$box/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <keep_umask/>
  <listen>unix:path=$XDG_RUNTIME_DIR/bus</listen>
  <auth>EXTERNAL</auth>
  <servicedir>$XDG_RUNTIME_DIR/dbus-1/services</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
EOF
        cat >"$XDG_RUNTIME_DIR/systemd/user/dbus.service.d/box.conf" <<EOF
[Service]
ExecStart=
ExecStart=/usr/bin/dbus-daemon --config-file=$box/bus.conf --address=systemd: --nofork --nopidfile --systemd-activation --syslog-only
EOF
        /usr/lib/systemd/systemd --user >"$box/manager.log" 2>&1 &
        manager=$!
        for _ in $(seq 1 300); do
                state=$(systemctl --user is-system-running 2>/dev/null || true)
                case "$state" in running|degraded) break ;; esac
                sleep 0.1
        done
        if ! systemctl --user is-system-running >/dev/null 2>&1 &&
           [ "$(systemctl --user is-system-running 2>/dev/null)" != degraded ]; then
                echo "box: user manager did not come up (state '$state'):" >&2
                cat "$box/manager.log" >&2
                kill "$manager" 2>/dev/null || true
                exit 1
        fi
        rc=0
        "$@" || rc=$?
        systemctl --user exit 2>/dev/null || kill "$manager" 2>/dev/null || true
        wait "$manager" 2>/dev/null || true
        exit $rc
fi

if [ "$(id -u)" != 0 ]; then
        echo "box: needs root to create cgroups and namespaces; skipping" >&2
        exit 77
fi
for d in /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do
        if [ ! -d "$d" ]; then
                echo "box: $d missing; this machine's cgroup layout is not the one TESTING.md describes" >&2
                exit 77
        fi
done

name=modelgate-box-$$
box=$(mktemp -d /tmp/modelgate-box.XXXXXX)
chmod 755 "$box"
mkdir -m 700 "$box/xdg"
mkdir "$box/home"
export MODELGATE_BOX=$box
pid1_before=$(cat /proc/1/cgroup)

cleanup() {
        for h in unified systemd; do
                [ -d "/sys/fs/cgroup/$h/$name" ] || continue
                # depth first: the manager's slices and scopes live under the box
                find "/sys/fs/cgroup/$h/$name" -depth -type d -exec rmdir {} \; 2>/dev/null || true
        done
        if [ "$(cat /proc/1/cgroup)" != "$pid1_before" ]; then
                echo "box: PID 1's cgroup changed! before: $pid1_before after: $(cat /proc/1/cgroup)" >&2
        fi
        [ -n "${KEEP_BOX:-}" ] || rm -rf "$box"
}
trap cleanup EXIT

rc=0
(
        for h in unified systemd; do
                mkdir "/sys/fs/cgroup/$h/$name"
                echo $BASHPID >"/sys/fs/cgroup/$h/$name/cgroup.procs"
        done
        exec unshare --cgroup --mount --pid --fork --mount-proc --propagation private \
                "$0" --inside "$@"
) || rc=$?
exit $rc

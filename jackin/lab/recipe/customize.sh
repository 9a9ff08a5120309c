#!/bin/sh
# Runs once inside the debootstrapped root (chroot) when the lab host image is built.
# It makes the root behave like a fresh Debian server booted in a container.
set -eu

# Host keys are generated per lab host by the operator side and injected before
# boot, so every host has its own key and the operator pins it without trust on first use.
rm -f /etc/ssh/ssh_host_*
cat > /etc/ssh/sshd_config.d/jackin-lab.conf <<'CONF'
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
MaxStartups 100:30:200
CONF

# Agent containers in the lab resolve nothing unless their policy names a resolver:
# a lab host's own resolver is the outer engine's, which would reach outside the lab.
mkdir -p /etc/docker
printf '{\n  "dns": ["127.0.0.1"]\n}\n' > /etc/docker/daemon.json

# systemd makes a machine id on first boot.
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id

# Nothing in a container needs a console; apt timers would take apt locks mid-test.
systemctl mask console-getty.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer \
    systemd-firstboot.service e2scrub_reap.service >/dev/null 2>&1 || true
systemctl enable ssh.service docker.service nftables.service jackin-agent-image.service

# Loop device nodes (the checkpoint tier's loop-mounted btrfs). A container's /dev is a tmpfs with no udev:
# losetup and mount -o loop ask /dev/loop-control for a free index N, then open /dev/loopN, which must exist.
# Loop devices are the kernel's, shared by every lab host: N may be any index, so make nodes for 0-255
# at each boot. The lab's run flags allow block major 7 (see RUN_FLAGS in jackin/lab/lab.py).
# One python3 for the 256 nodes, not a mknod and a chgrp each: every lab host boot paid for 512 processes.
cat > /usr/local/sbin/jackin-loop-nodes <<'PY'
#!/usr/bin/python3 -S
import grp
import os
import stat

disk = grp.getgrnam("disk").gr_gid
for index in range(256):
    node = f"/dev/loop{index}"
    if not os.path.exists(node):
        os.mknod(node, 0o660 | stat.S_IFBLK, os.makedev(7, index))
    os.chown(node, -1, disk)
    os.chmod(node, 0o660)
PY
chmod 0755 /usr/local/sbin/jackin-loop-nodes
cat > /etc/systemd/system/jackin-loop-nodes.service <<'UNIT'
[Unit]
Description=Loop device nodes for loop mounts (a container has no udev)
DefaultDependencies=no
ConditionPathExists=/dev/loop-control
Before=local-fs-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/jackin-loop-nodes

[Install]
WantedBy=sysinit.target
UNIT
systemctl enable jackin-loop-nodes.service

# A registry-free image for agent containers (imported at boot by jackin-agent-image.service).
mkdir -p /usr/share/jackin
sh /tmp/agent-image.sh tar /usr/share/jackin/agent-rootfs.tar

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log

#!/bin/sh
# The registry-free agent image: busybox-static in an otherwise empty root.
#   agent-image.sh tar PATH      write the root as a tar (lab image build)
#   agent-image.sh import IMAGE  import it into the local Docker engine (host bootstrap)
set -eu
mode=$1 target=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/workspace"
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"
case "$mode" in
    tar) tar -C "$root" -cf "$target" . ;;
    import) tar -C "$root" -c . | docker import --change 'CMD ["/bin/sh"]' - "$target" >/dev/null ;;
    *) echo "usage: agent-image.sh tar PATH | import IMAGE" >&2; exit 2 ;;
esac

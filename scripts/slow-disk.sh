#!/usr/bin/env bash
# A small ext4 file system mounted with -o sync on a loop device: storage slower than the page cache, for
# `h5flow bench async` (docs/ASYNC.md "Slow storage"). Every write to it reaches the image file before the
# write returns, so a benchmark sees the cost that a disk or a parallel file system adds and page cache hides.
#
#   scripts/slow-disk.sh mount DIR [SIZE]    # SIZE as truncate takes it (default 512M); needs root
#   scripts/slow-disk.sh umount DIR          # unmounts it and removes its image; needs root
#   scripts/slow-disk.sh status DIR          # whether DIR is such a mount, and its image
#
# The image is a sparse file in $H5FLOW_SLOW_DISK_IMAGES (default /var/tmp), named after DIR; DIR is created
# when missing and left in place at umount. The mount is world-writable with the sticky bit, like /tmp.
set -euo pipefail

prog=slow-disk.sh
images=${H5FLOW_SLOW_DISK_IMAGES:-/var/tmp}

usage() {
    cat <<EOF
usage: scripts/$prog mount DIR [SIZE]
       scripts/$prog umount DIR
       scripts/$prog status DIR

mount    create a sparse image of SIZE bytes (default 512M; K, M, G suffixes as truncate takes them) in
         $images (H5FLOW_SLOW_DISK_IMAGES), make an ext4 file system in it and mount it on DIR with
         -o loop,sync: every write reaches the image before it returns. DIR is created when missing and
         must be empty and not a mount point. Needs root.
umount   unmount DIR (only a mount this script made) and remove its image. DIR itself stays. Needs root.
status   say whether DIR is a slow disk of this script, and its image and size.

Then, for example: h5flow bench async --kernel c --mode both --dirs /var/tmp /dev/shm DIR
EOF
}

die() {
    echo "$prog: $*" >&2
    exit 1
}

# the image of DIR: one file per mount point, named after its absolute path
image_of() {
    local name=${1#/}
    echo "$images/h5flow-slow-disk.${name//\//_}.img"
}

need_root() {
    [[ $(id -u) -eq 0 ]] || die "$cmd needs root (mount, umount, losetup): run it as root, e.g. sudo scripts/$prog $args"
}

# the image file behind the loop mount on DIR, or nothing when DIR is not a loop mount
backing_file() {
    local src
    src=$(findmnt -n -o SOURCE --mountpoint "$1" 2>/dev/null || true)
    [[ $src == /dev/loop* ]] || return 0
    losetup -n -O BACK-FILE "$src" 2>/dev/null | sed 's/ *(deleted)$//; s/^ *//; s/ *$//'
}

cmd=${1:-}
args="$*"
case $cmd in
-h | --help | help)
    usage
    exit 0
    ;;
mount | umount | status) ;;
"")
    usage >&2
    exit 2
    ;;
*)
    echo "$prog: unknown command '$cmd' (mount, umount or status; --help)" >&2
    exit 2
    ;;
esac
[[ $# -ge 2 && -n $2 ]] || {
    echo "$prog: $cmd wants a directory (--help for the usage)" >&2
    exit 2
}
max_args=2
[[ $cmd == mount ]] && max_args=3
[[ $# -le $max_args ]] || {
    echo "$prog: $cmd takes at most $((max_args - 1)) argument(s), $(($# - 1)) given (--help)" >&2
    exit 2
}
dir=$(realpath -m -- "$2")
image=$(image_of "$dir")

case $cmd in
status)
    if mountpoint -q -- "$dir" 2>/dev/null; then
        back=$(backing_file "$dir")
        if [[ $back == "$image" ]]; then
            opts=$(findmnt -n -o OPTIONS --mountpoint "$dir")
            echo "$dir: slow disk, image $image ($(du -h --apparent-size "$image" | cut -f1)), options $opts"
            exit 0
        fi
        echo "$dir: a mount point, not a slow disk of this script (source $(findmnt -n -o SOURCE --mountpoint "$dir"))"
        exit 1
    fi
    echo "$dir: not mounted"
    exit 1
    ;;
mount)
    size=${3:-512M}
    [[ $size =~ ^[0-9]+[KMGT]?$ ]] || {
        echo "$prog: SIZE '$size' is not a size (a whole number with an optional K, M, G or T suffix)" >&2
        exit 2
    }
    if mountpoint -q -- "$dir" 2>/dev/null; then
        back=$(backing_file "$dir")
        if [[ $back == "$image" ]]; then
            die "$dir is already a slow disk (image $image): unmount it first (scripts/$prog umount $dir)"
        fi
        die "$dir is already a mount point (of $(findmnt -n -o SOURCE --mountpoint "$dir")): choose another directory"
    fi
    [[ ! -e $dir || -d $dir ]] || die "$dir exists and is not a directory"
    if [[ -d $dir ]] && [[ -n $(ls -A -- "$dir") ]]; then
        die "$dir is not empty: mounting on it would hide its files; choose an empty or new directory"
    fi
    need_root
    for tool in mkfs.ext4 losetup; do
        command -v "$tool" >/dev/null || die "$tool not found (e2fsprogs, util-linux)"
    done
    [[ ! -e $image ]] || die "$image already exists (a slow disk of $dir not unmounted by this script?): remove it first"
    mkdir -p -- "$images" "$dir"
    truncate -s "$size" -- "$image" || die "cannot create the image $image of $size"
    if ! out=$(mkfs.ext4 -q -F -- "$image" 2>&1); then
        rm -f -- "$image"
        die "mkfs.ext4 on $image failed: $out"
    fi
    if ! out=$(mount -o loop,sync -- "$image" "$dir" 2>&1); then
        rm -f -- "$image"
        die "mounting $image on $dir failed (loop devices available? in a container, --privileged): $out"
    fi
    chmod 1777 -- "$dir"
    echo "$dir: ext4 of $size mounted with -o sync (image $image); unmount with scripts/$prog umount $dir"
    ;;
umount)
    mountpoint -q -- "$dir" 2>/dev/null || die "$dir is not mounted"
    back=$(backing_file "$dir")
    [[ $back == "$image" ]] ||
        die "$dir is not a slow disk of this script (its source is $(findmnt -n -o SOURCE --mountpoint "$dir")): left alone"
    need_root
    umount -- "$dir" || die "cannot unmount $dir (a process still uses it? fuser -vm $dir)"
    rm -f -- "$image"
    echo "$dir: unmounted, image $image removed"
    ;;
esac

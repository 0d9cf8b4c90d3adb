# Sourced by .ci/run and scripts/test.sh: makes sure /dev/null is the null device.
#
# On a machine where something renamed a regular file over /dev/null (as root), every
# `2>/dev/null` appends to that file and every `</dev/null` reads it back; cargo then feeds
# the text to rustc as source and the build fails with "unknown start of token". CI has met
# such machines, so the suite repairs it (root only) and says so.
ensure_dev_null() {
    if [ -c /dev/null ]; then
        return 0
    fi
    local kind
    kind="$(stat -c %F /dev/null 2>/dev/null || echo missing)"
    if [ "$(id -u)" -eq 0 ]; then
        rm -f /dev/null && mknod -m 666 /dev/null c 1 3
        printf 'dev-null: /dev/null was a %s, not the null device: recreated it (mknod c 1 3)\n' "$kind" >&2
    else
        printf 'dev-null: /dev/null is a %s, not the null device; builds will fail (as root: rm /dev/null; mknod -m 666 /dev/null c 1 3)\n' "$kind" >&2
        return 1
    fi
}

#!/usr/bin/env bash
# The manual page, dlserve.8, that the build writes with `dlserve --man`
# (beside the binary) and installs: the binary's output as it is now; it
# renders without warnings (man -l, else groff, else its roff structure
# is checked); every option of --help and every [section] key of
# --config-reference is on it.
. "$(dirname "$0")/../lib/lib.sh"

PAGE=$(dirname "$DLSERVE")/dlserve.8
check "the build wrote dlserve.8" test -s "$PAGE"
"$DLSERVE" --man > "$WORK/man.8"; rc=$?
check "--man exits 0" test $rc -eq 0
check "dlserve.8 is what --man prints" cmp -s "$PAGE" "$WORK/man.8"
for s in NAME SYNOPSIS DESCRIPTION OPTIONS ENVIRONMENT "EXIT STATUS" FILES; do
    check "it has .SH $s" grep -qx "\.SH $s" "$PAGE"
done
check "it starts with .TH DLSERVE 8" grep -q '^\.TH DLSERVE 8 ' "$PAGE"

# The page as text, one line a paragraph's head (wide lines, no wrapping).
if command -v man > /dev/null; then
    MANWIDTH=250 LC_ALL=C.UTF-8 man --warnings -l -P cat "$PAGE" > "$WORK/man.out" 2> "$WORK/man.err"
    rc=$? renderer=man
elif command -v groff > /dev/null; then
    groff -man -Tascii -P-c -P-b -P-u -ww -rLL=250n "$PAGE" > "$WORK/man.out" 2> "$WORK/man.err"
    rc=$? renderer=groff
else
    renderer=
    echo "# neither man nor groff: the roff structure alone is checked"
fi
if [ -n "$renderer" ]; then
    check "$renderer renders it (exit 0)" test $rc -eq 0
    check "... without a warning" test ! -s "$WORK/man.err"
    [ -s "$WORK/man.err" ] && sed 's/^/#   /' "$WORK/man.err"
    sed -i 's/.\x08//g' "$WORK/man.out"    # overstrike bold, should any be left
    TEXT=$WORK/man.out
else
    # option names as written in roff: \- for each hyphen, no escapes left bare
    sed 's/\\-/-/g; s/\\f[BIR]//g' "$PAGE" > "$WORK/man.out"
    TEXT=$WORK/man.out
    check "every .TP is followed by its tag line" \
        test "$(grep -c '^\.TP$' "$PAGE")" -eq "$(grep -A1 '^\.TP$' "$PAGE" | grep -c '^\\f[BI]')"
fi

# every option of --help: "-x, --name ARG" or "--name ARG", and the modes
# of its synopsis ("dlserve --train MODEL_DIR ...")
"$DLSERVE" --help > "$WORK/help"
sed -n 's/^  \(-[A-Za-z], \)\{0,1\}\(--[a-z0-9-]*\).*/\2/p' "$WORK/help" > "$WORK/options"
n=$(wc -l < "$WORK/options")
check "--help lists options ($n)" test "$n" -ge 40
sed -n 's/^.*dlserve \(--[a-z-]*\) .*/\1/p' "$WORK/help" | grep -v -e --config >> "$WORK/options"
check "... and modes" grep -qx -- --export "$WORK/options"
missing=$(while read -r o; do grep -q -- "^ *\(-[A-Za-z], \)\{0,1\}$o\( \|$\)" "$TEXT" || echo "$o"; done \
          < "$WORK/options")
check "every option of --help is on the page${missing:+ (missing: $missing)}" test -z "$missing"
check "-V, --version is there" grep -q -- "^ *-V, --version$" "$TEXT"
check "--version V is named as --model-version's old name" \
    grep -q -- "formerly --version V" "$TEXT"

# every daemon option, where the build has the daemon
if "$DLSERVE" --config-reference > "$WORK/ref.md" 2> /dev/null; then
    sed -n 's/^| \([a-z_]*\) | \([a-z_]*\) | .*/[\1] \2/p' "$WORK/ref.md" |
        grep -vx '\[section\] key' > "$WORK/keys"
    n=$(wc -l < "$WORK/keys")
    check "--config-reference lists options ($n)" test "$n" -ge 30
    missing=$(while read -r k; do grep -qF -- "$k = " "$TEXT" || echo "$k"; done < "$WORK/keys")
    check "every configuration option is on the page${missing:+ (missing: $missing)}" \
        test -z "$missing"
fi
finish

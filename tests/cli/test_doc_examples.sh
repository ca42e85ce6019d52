#!/usr/bin/env bash
# The manual's configuration examples run: every ```ini block of docs/*.md
# (docs/configuration.md and docs/kafka.md among them; blocks that are not
# a whole, valid dlserve.conf stay plain ```) passes `dlserve
# --check-config`, librdkafka's check of the [kafka.*] properties
# included, and its options come out as written. ${file:PATH} references
# point at files made here, ${env:NAME} at variables set here.
. "$(dirname "$0")/../lib/lib.sh"

mkdir -p "$WORK/blocks" "$WORK/secrets"
# One file a block, BLOCK.conf, its origin (docs/x.md:LINE) in BLOCK.where
# and the "key = value" lines --check-config must print in BLOCK.expect;
# the ${env:} names, one a line, in env.
/usr/bin/python3 - "$SRC" "$WORK" <<'PY'
import glob, os, re, sys
src, work = sys.argv[1], sys.argv[2]
names, nfile = set(), 0
for doc in sorted(glob.glob(os.path.join(src, "docs", "*.md"))):
    lines = open(doc, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```ini":
            i += 1
            continue
        start, indent = i + 1, len(lines[i]) - len(lines[i].lstrip())
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        def to_file(m):
            global nfile
            nfile += 1
            path = os.path.join(work, "secrets", "s%d" % nfile)
            open(path, "w").write("doc-secret-%d\n" % nfile)
            return "${file:%s}" % path
        text = "\n".join(body) + "\n"
        names.update(re.findall(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}", text))
        text = re.sub(r"\$\{file:[^}]*\}", to_file, text)
        base = os.path.join(work, "blocks", "%s-%d" % (os.path.basename(doc)[:-3], start))
        open(base + ".conf", "w").write(text)
        open(base + ".where", "w").write("%s:%d\n" % (os.path.relpath(doc, src), start))
        with open(base + ".expect", "w") as f:
            for l in body:
                m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*=\s*(.*?)\s*$", l)
                if m and "${" not in m.group(2):
                    f.write("%s = %s\n" % (m.group(1), m.group(2)))
        i += 1
open(os.path.join(work, "env"), "w").write("".join(n + "\n" for n in sorted(names)))
PY
while read -r name; do export "$name=doc-value-$name"; done < "$WORK/env"

n=$(find "$WORK/blocks" -name '*.conf' | wc -l)
check "docs hold configuration examples ($n ini blocks)" test "$n" -ge 5
for doc in configuration kafka; do
    check "docs/$doc.md has ini blocks" test -n "$(compgen -G "$WORK/blocks/$doc-*.conf")"
done

# has_all EXPECT OUT: each line of EXPECT is a line of OUT
has_all() { ! grep -vxF -f "$2" "$1" | grep -q .; }
for conf in "$WORK"/blocks/*.conf; do
    b=${conf%.conf} where=$(cat "${conf%.conf}.where")
    "$DLSERVE" --check-config "$conf" > "$b.out" 2> "$b.err"; rc=$?
    check "$where passes --check-config" test $rc -eq 0
    [ $rc -eq 0 ] || sed 's/^/#   /' "$b.err"
    check "$where: its options come out as written" has_all "$b.expect" "$b.out"
done

# The runner tells a bad example: Java's sasl.jaas.config (librdkafka has
# no JAAS), refused with its file:line where Kafka is built in.
printf '[kafka.client]\nsasl.mechanisms = PLAIN\nsasl.jaas.config = x required;\n' > "$WORK/jaas.conf"
"$DLSERVE" --check-config "$WORK/jaas.conf" > /dev/null 2> "$WORK/jaas.err"; rc=$?
if grep -q "were not checked" "$WORK/jaas.err"; then
    check "without Kafka: the properties are said unchecked" test $rc -eq 0
else
    check "sasl.jaas.config refused with file:line" fails_with "$WORK/jaas.err" $rc \
        "jaas.conf:3: Kafka property 'sasl.jaas.config': Java JAAS configuration is not supported"
fi
finish

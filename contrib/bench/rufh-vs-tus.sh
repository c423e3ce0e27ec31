#!/usr/bin/env bash
# Benchmark: one file (256 MiB by default) uploaded by uploadq with IETF Resumable Uploads (RUFH, interop 8) to
# our RUFH test server, against uploadq with tus 1.0 to tuspyserver, both on loopback in 8 MiB chunks; each
# upload is checked on its server. Prints wall, CPU and peak RSS with the RUFH run's ratio to the tus run.
#   contrib/bench/rufh-vs-tus.sh            SIZE_MB=256 RUNS=3
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_prepare "$@"
size_mb=${SIZE_MB:-256}
runs=${RUNS:-3}
size=$((size_mb * 1024 * 1024))
file="$work/payload.bin"
head -c "$size" /dev/urandom > "$file"
cat "$file" > /dev/null
digest=$(sha256sum "$file" | cut -d' ' -f1)
rufh=$(curl -s -X POST -d '{"interop": 8}' "$UPLOADQ_TEST_RUFH_CONTROL/servers")
rufh_endpoint=$(printf '%s' "$rufh" | python3 -c 'import json, sys; print(json.load(sys.stdin)["endpoint"])')
rufh_id=$(printf '%s' "$rufh" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')

config() { # name protocol url → a config with one destination
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[destinations.d]
protocol = "$2"
url = "$3"
chunk_size = "8MiB"
$( [ "$2" = rufh ] && echo 'interop_version = 8' )
TOML
    "$binary" enqueue "$file" --mode reference --destination d --config "$work/$1.toml" > /dev/null
    echo "$work/$1.toml"
}

for run in $(seq 1 "$runs"); do
    tus_config=$(config "tus-$run" tus "$UPLOADQ_TEST_TUS_ENDPOINT")
    measure upload "uploadq tus → tuspyserver" "$binary" daemon --exit-when-idle --log-level warning --config "$tus_config"
    stored=$(find "$UPLOADQ_TEST_TUS_FILES" -maxdepth 1 -type f ! -name '*.info' -size "${size}c")
    [ "$(printf '%s\n' "$stored" | grep -c .)" -eq 1 ] && cmp -s "$stored" "$file" \
        || { echo "bench: tus did not store one copy of the file" >&2; exit 1; }
    find "$UPLOADQ_TEST_TUS_FILES" -maxdepth 1 -type f -delete

    rufh_config=$(config "rufh-$run" rufh "$rufh_endpoint")
    measure upload "uploadq rufh → our server" "$binary" daemon --exit-when-idle --log-level warning --config "$rufh_config"
    stored=$(curl -s "$UPLOADQ_TEST_RUFH_CONTROL/servers/$rufh_id/uploads" | python3 -c "
import json, sys
uploads = json.load(sys.stdin)
print(' '.join(k for k, u in uploads.items() if u['complete'] and u['sha256'] == '$digest' and not u['deleted']))")
    [ "$(echo $stored | wc -w)" -eq 1 ] || { echo "bench: rufh did not store one copy of the file" >&2; exit 1; }
    # Each upload starts on an empty server: the stored copy goes.
    curl -s -o /dev/null -X DELETE -H "Upload-Draft-Interop-Version: 8" "$rufh_endpoint$stored"
done
table "RUFH (interop 8) against tus 1.0: $size_mb MiB on loopback, 8 MiB chunks, median of $runs"

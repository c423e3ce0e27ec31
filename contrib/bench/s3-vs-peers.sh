#!/usr/bin/env bash
# Benchmark: S3 uploads to moto_server on loopback, uploadq against `aws s3 cp` and rclone: one large file
# (256 MiB, 8 MiB parts) and many small ones (500 × 256 KiB, 4 at once). Prints wall, CPU and peak RSS with
# ratios against the aws cli. moto is a Python server: all three wait on it alike; the ratios are what count.
# "uploadq enqueue + drain" is the whole command as a user times it (with the intake's SHA-256 of each file);
# "uploadq, sha256 while sending" the same with `sha256 = "while-sending"` (a multipart upload hashes the file
# beside its parts; a PutObject, signed with the digest, hashes its file just before it is sent).
#   contrib/bench/s3-vs-peers.sh            LARGE_MIB=256 SMALL_COUNT=500 RUNS=3
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
source contrib/bench/lib.sh
bench_prepare "$@"
large_mib=${LARGE_MIB:-256}
small_count=${SMALL_COUNT:-500}
runs=${RUNS:-3}
endpoint="$UPLOADQ_TEST_S3_ENDPOINT"
export AWS_ACCESS_KEY_ID=AKIDBENCH AWS_SECRET_ACCESS_KEY=bench-secret AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
# A CA bundle in the environment makes rclone's S3 backend refuse to start (and plain http needs none).
unset AWS_CA_BUNDLE
export RCLONE_CONFIG_MOTO_TYPE=s3 RCLONE_CONFIG_MOTO_PROVIDER=Other RCLONE_CONFIG_MOTO_ENDPOINT="$endpoint" \
    RCLONE_CONFIG_MOTO_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \
    RCLONE_CONFIG_MOTO_REGION=us-east-1 RCLONE_CONFIG_MOTO_FORCE_PATH_STYLE=true
aws="$root/.build-venv/bin/aws"
large="$work/large.bin"
head -c "$((large_mib << 20))" /dev/urandom > "$large"
mkdir -p "$work/small"
for index in $(seq 1 "$small_count"); do head -c 262144 /dev/urandom > "$work/small/p$index.jpg"; done
cat "$large" "$work"/small/* > /dev/null

config() { # bucket [sha256 timing] → an uploadq config for it
    cat > "$work/$1.toml" <<TOML
state_dir = "state-$1"
[limits]
concurrency = 4
[destinations.s3]
protocol = "s3"
endpoint = "$endpoint"
bucket = "$1"
part_size = "8MiB"
multipart_threshold = "8MiB"
sha256 = "${2:-at-intake}"
TOML
    echo "$work/$1.toml"
}

for run in $(seq 1 "$runs"); do
    for kind in large small; do
        for tool in aws rclone uploadq uploadq-e2e uploadq-streamed; do
            bucket="b-$kind-$tool-$run"
            curl -sf -X PUT "$endpoint/$bucket" > /dev/null
            case "$tool-$kind" in
            aws-large) measure large "aws s3 cp" "$aws" s3 cp --only-show-errors --endpoint-url "$endpoint" "$large" "s3://$bucket/large.bin" ;;
            aws-small) measure small "aws s3 cp" "$aws" s3 cp --only-show-errors --recursive --endpoint-url "$endpoint" "$work/small" "s3://$bucket/small/" ;;
            rclone-large) measure large rclone rclone copyto --s3-chunk-size 8M --s3-upload-cutoff 8M "$large" "moto:$bucket/large.bin" ;;
            rclone-small) measure small rclone rclone copy --transfers 4 "$work/small" "moto:$bucket/small" ;;
            uploadq-large)
                cfg=$(config "$bucket")
                "$binary" enqueue "$large" --mode reference --destination s3 --config "$cfg" > /dev/null
                measure large "uploadq transfer" "$binary" daemon --exit-when-idle --log-level warning --config "$cfg" ;;
            uploadq-small)
                cfg=$(config "$bucket")
                "$binary" enqueue "$work"/small/* --mode reference --destination s3 --config "$cfg" > /dev/null
                measure small "uploadq transfer" "$binary" daemon --exit-when-idle --log-level warning --config "$cfg" ;;
            # End to end, as a user times it: the enqueue (SHA-256 of each file) and the drain in one command.
            uploadq-e2e-large)
                cfg=$(config "$bucket")
                measure large "uploadq enqueue + drain" sh -c "'$binary' enqueue '$large' --mode reference \
                    --destination s3 --config '$cfg' > /dev/null \
                    && '$binary' daemon --exit-when-idle --log-level warning --config '$cfg'" ;;
            uploadq-e2e-small)
                cfg=$(config "$bucket")
                measure small "uploadq enqueue + drain" sh -c "'$binary' enqueue '$work'/small/* --mode reference \
                    --destination s3 --config '$cfg' > /dev/null \
                    && '$binary' daemon --exit-when-idle --log-level warning --config '$cfg'" ;;
            uploadq-streamed-large)
                cfg=$(config "$bucket" while-sending)
                measure large "uploadq, sha256 while sending" sh -c "'$binary' enqueue '$large' --mode reference \
                    --destination s3 --config '$cfg' > /dev/null \
                    && '$binary' daemon --exit-when-idle --log-level warning --config '$cfg'" ;;
            uploadq-streamed-small)
                cfg=$(config "$bucket" while-sending)
                measure small "uploadq, sha256 while sending" sh -c "'$binary' enqueue '$work'/small/* --mode reference \
                    --destination s3 --config '$cfg' > /dev/null \
                    && '$binary' daemon --exit-when-idle --log-level warning --config '$cfg'" ;;
            esac
            count=$(curl -sf -H "Authorization: AWS4-HMAC-SHA256 Credential=AKIDBENCH/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00" \
                "$endpoint/$bucket?list-type=2&max-keys=1000" | grep -o "<Key>" | wc -l)
            want=$([ "$kind" = large ] && echo 1 || echo "$small_count")
            [ "$count" -eq "$want" ] || { echo "bench: $tool stored $count of $want objects" >&2; exit 1; }
            # Each upload starts on an empty server: moto keeps every object in memory, and grows slower with them.
            curl -sf -X POST "$endpoint/moto-api/reset" > /dev/null
        done
    done
done
table "S3 to moto_server on loopback: $large_mib MiB (8 MiB parts) and $small_count × 256 KiB (4 at once), median of $runs"

#!/usr/bin/env bash
# Starts the integration-test servers on free loopback ports, runs COMMAND with their addresses in the
# environment, then stops them. Usage: contrib/test-servers/run.sh COMMAND [ARGS...]
#
#   UPLOADQ_TEST_TUS_ENDPOINT   tuspyserver's creation URL (http://127.0.0.1:P/files/)
#   UPLOADQ_TEST_TUS_FILES      where tuspyserver stores uploads (<id> and <id>.info)
#   UPLOADQ_TEST_DAV_URL        nginx DAV (PUT), UPLOADQ_TEST_DAV_ROOT its document root and
#                               UPLOADQ_TEST_DAV_ACCESS_LOG its requests ("METHOD URI STATUS CONNECTION REQUESTS")
#   UPLOADQ_TEST_DAV_TLS_URL    the same over HTTPS, with a certificate of a private CA (UPLOADQ_TEST_CA_FILE)
#   UPLOADQ_TEST_PROXY_CONTROL  the fault proxy's control API
#   UPLOADQ_TEST_RECORDER_URL   the recording server
#   UPLOADQ_TEST_S3_ENDPOINT    moto_server (S3; accepts any signature)
#   UPLOADQ_TEST_S3_AUTH_ENDPOINT  a second moto_server that checks signatures, with bucket `secure` and an IAM
#                               user's keys in UPLOADQ_TEST_S3_AUTH_ACCESS_KEY / UPLOADQ_TEST_S3_AUTH_SECRET_KEY
#   UPLOADQ_TEST_AWS            the aws cli from the virtualenv
#   UPLOADQ_TEST_RUFH_CONTROL   our strict IETF resumable-upload server (interop 6, 7, 8): its control API makes
#                               servers with their own limits (contrib/test-servers/rufh_server.py)
#   UPLOADQ_TEST_NIO_RUFH_ENDPOINT  swift-nio-extras' NIOResumableUpload (interop 6) at /files/, storing completed
#                               uploads into UPLOADQ_TEST_NIO_RUFH_FILES (contrib/nio-rufh-server)
#   UPLOADQ_TEST_MINT_CONTROL   an app backend that mints presigned upload URLs with botocore
#                               (contrib/test-servers/mint_backend.py)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/contrib/test-servers"
python="$root/.build-venv/bin/python"
[ -x "$python" ] || { echo "test-servers: no virtualenv; run contrib/test-servers/setup.sh first" >&2; exit 1; }
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || { echo "test-servers: nginx is not installed; run contrib/test-servers/setup.sh first" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/uploadq-servers-XXXXXX")"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

read -r tus_port dav_port proxy_port recorder_port tls_port s3_port s3_auth_port rufh_port mint_port nio_port < <("$python" - <<'PY'
import socket
sockets = [socket.socket() for _ in range(10)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in sockets))
PY
)

mkdir -p "$work/tus" "$work/dav" "$work/recorder" "$work/tls" "$work/rufh" "$work/nio-rufh"
nio_server="$root/contrib/nio-rufh-server/.build/debug/nio-rufh-server"
[ -x "$nio_server" ] || { echo "test-servers: $nio_server is not built; run contrib/test-servers/setup.sh" >&2; exit 1; }
# A private CA and a certificate for 127.0.0.1 signed by it, for the TLS tests.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=uploadq test CA" \
    -keyout "$work/tls/ca.key" -out "$work/tls/ca.pem" 2> /dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$work/tls/server.key" \
    -out "$work/tls/server.csr" 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$work/tls/ext.cnf"
openssl x509 -req -in "$work/tls/server.csr" -CA "$work/tls/ca.pem" -CAkey "$work/tls/ca.key" -CAcreateserial \
    -days 2 -extfile "$work/tls/ext.cnf" -out "$work/tls/server.pem" 2> /dev/null
user=""
[ "$(id -u)" -eq 0 ] && user="user root root;"
sed -e "s|@WORK@|$work|g" -e "s|@PORT@|$dav_port|g" -e "s|@TLS_PORT@|$tls_port|g" -e "s|@TUS_PORT@|$tus_port|g" \
    -e "s|@USER@|$user|g" "$here/nginx.conf.in" > "$work/nginx.conf"

"$python" "$here/tus_server.py" "$tus_port" "$work/tus" > "$work/tus.log" 2>&1 & pids+=($!)
"$nginx" -c "$work/nginx.conf" -p "$work" -e "$work/nginx-error.log" > "$work/nginx.log" 2>&1 & pids+=($!)
"$python" "$here/fault_proxy.py" "$proxy_port" > "$work/proxy.log" 2>&1 & pids+=($!)
"$python" "$here/recorder.py" "$recorder_port" "$work/recorder" > "$work/recorder.log" 2>&1 & pids+=($!)
"$python" "$here/rufh_server.py" "$rufh_port" "$work/rufh" > "$work/rufh.log" 2>&1 & pids+=($!)
"$python" "$here/mint_backend.py" "$mint_port" > "$work/mint.log" 2>&1 & pids+=($!)
# Relative Locations, so its upload URLs stay behind a fault proxy put in front of it.
NIO_RUFH_ORIGIN="" "$nio_server" "$nio_port" "$work/nio-rufh" > "$work/nio-rufh.log" 2>&1 & pids+=($!)
"$root/.build-venv/bin/moto_server" -H 127.0.0.1 -p "$s3_port" > "$work/moto.log" 2>&1 & pids+=($!)
# The first three requests (create an IAM user, allow it everything, make its keys) go unchecked; every later
# one must carry a valid signature.
INITIAL_NO_AUTH_ACTION_COUNT=3 "$root/.build-venv/bin/moto_server" -H 127.0.0.1 -p "$s3_auth_port" \
    > "$work/moto-auth.log" 2>&1 & pids+=($!)

wait_for() {
    local name=$1 url=$2 log=$3
    for _ in $(seq 1 150); do
        if curl -s -o /dev/null -X OPTIONS "$url"; then return 0; fi
        sleep 0.1
    done
    echo "test-servers: $name did not start on $url; its log:" >&2
    cat "$log" >&2
    exit 1
}
wait_for tuspyserver "http://127.0.0.1:$tus_port/files/" "$work/tus.log"
wait_for nginx "http://127.0.0.1:$dav_port/" "$work/nginx-error.log"
curl -s -o /dev/null --cacert "$work/tls/ca.pem" "https://127.0.0.1:$tls_port/" \
    || { echo "test-servers: nginx TLS did not start on :$tls_port" >&2; cat "$work/nginx-error.log" >&2; exit 1; }
wait_for fault-proxy "http://127.0.0.1:$proxy_port/health" "$work/proxy.log"
wait_for recorder "http://127.0.0.1:$recorder_port/record/health" "$work/recorder.log"
wait_for rufh-server "http://127.0.0.1:$rufh_port/control/health" "$work/rufh.log"
wait_for mint-backend "http://127.0.0.1:$mint_port/control/health" "$work/mint.log"
wait_for nio-rufh "http://127.0.0.1:$nio_port/health" "$work/nio-rufh.log"
wait_for moto "http://127.0.0.1:$s3_port/moto-api/" "$work/moto.log"
wait_for moto-auth "http://127.0.0.1:$s3_auth_port/moto-api/" "$work/moto-auth.log"

aws="$root/.build-venv/bin/aws"
s3_auth="http://127.0.0.1:$s3_auth_port"
export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
AWS_ACCESS_KEY_ID=setup AWS_SECRET_ACCESS_KEY=setup "$aws" --endpoint-url "$s3_auth" iam create-user \
    --user-name uploadq > /dev/null
AWS_ACCESS_KEY_ID=setup AWS_SECRET_ACCESS_KEY=setup "$aws" --endpoint-url "$s3_auth" iam put-user-policy \
    --user-name uploadq --policy-name all \
    --policy-document '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'
read -r s3_auth_access s3_auth_secret < <(AWS_ACCESS_KEY_ID=setup AWS_SECRET_ACCESS_KEY=setup "$aws" \
    --endpoint-url "$s3_auth" iam create-access-key --user-name uploadq \
    --query 'AccessKey.[AccessKeyId,SecretAccessKey]' --output text)
AWS_ACCESS_KEY_ID="$s3_auth_access" AWS_SECRET_ACCESS_KEY="$s3_auth_secret" "$aws" --endpoint-url "$s3_auth" \
    s3api create-bucket --bucket secure > /dev/null

export UPLOADQ_TEST_TUS_ENDPOINT="http://127.0.0.1:$tus_port/files/"
export UPLOADQ_TEST_TUS_FILES="$work/tus"
export UPLOADQ_TEST_DAV_URL="http://127.0.0.1:$dav_port"
export UPLOADQ_TEST_DAV_ROOT="$work/dav"
export UPLOADQ_TEST_DAV_ACCESS_LOG="$work/dav-access.log"
export UPLOADQ_TEST_DAV_TLS_URL="https://127.0.0.1:$tls_port"
export UPLOADQ_TEST_CA_FILE="$work/tls/ca.pem"
export UPLOADQ_TEST_PROXY_CONTROL="http://127.0.0.1:$proxy_port"
export UPLOADQ_TEST_RECORDER_URL="http://127.0.0.1:$recorder_port"
export UPLOADQ_TEST_S3_ENDPOINT="http://127.0.0.1:$s3_port"
export UPLOADQ_TEST_S3_AUTH_ENDPOINT="$s3_auth"
export UPLOADQ_TEST_S3_AUTH_ACCESS_KEY="$s3_auth_access"
export UPLOADQ_TEST_S3_AUTH_SECRET_KEY="$s3_auth_secret"
export UPLOADQ_TEST_AWS="$aws"
export UPLOADQ_TEST_RUFH_CONTROL="http://127.0.0.1:$rufh_port/control"
export UPLOADQ_TEST_MINT_CONTROL="http://127.0.0.1:$mint_port/control"
export UPLOADQ_TEST_NIO_RUFH_ENDPOINT="http://127.0.0.1:$nio_port/files/"
export UPLOADQ_TEST_NIO_RUFH_FILES="$work/nio-rufh"
export UPLOADQ_TEST_CLOCKSHIFT="$root/.build-venv/libclockshift.so"
# A daemon of the debug build stops at a blocking call (SQLite) on Swift's shared threads (BlockingCheck): every
# test that runs one fails on it.
export UPLOADQ_BLOCKING_CHECK=trap
echo "test-servers: tus :$tus_port, nginx DAV :$dav_port (TLS :$tls_port), fault proxy :$proxy_port," \
    "recorder :$recorder_port, moto :$s3_port (signatures checked :$s3_auth_port), rufh :$rufh_port, mint :$mint_port, nio-rufh :$nio_port" >&2

status=0
"$@" || status=$?
if [ "$status" -ne 0 ]; then
    for log in tus.log nginx-error.log proxy.log recorder.log moto.log moto-auth.log rufh.log mint.log nio-rufh.log; do
        if [ -s "$work/$log" ]; then echo "--- test-servers: $log (last lines)" >&2; tail -n 20 "$work/$log" >&2; fi
    done
fi
exit "$status"

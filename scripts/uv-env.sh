# shellcheck shell=bash
# Sourced by scripts/setup and scripts/install-phoenix before they run uv: the machine's
# interpreter, never one uv downloads; and since uv reads its own settings, not pip's, a
# machine's pip index and certificate carry over unless uv's own are set.
export UV_PYTHON_DOWNLOADS=never
[ -z "${PIP_INDEX_URL:-}" ] || export UV_DEFAULT_INDEX="${UV_DEFAULT_INDEX:-$PIP_INDEX_URL}"
[ -z "${PIP_CERT:-}" ] || export SSL_CERT_FILE="${SSL_CERT_FILE:-$PIP_CERT}"

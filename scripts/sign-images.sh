#!/usr/bin/env bash
# Sign the release images the pipeline never builds (tools, serve, MLflow), by digest, with the key
# and flags of the build step (steps/build_image.py sign_command), so that Kyverno's verify-signature
# rule (argo/policies.yaml: key attestor, rekor.ignoreTlog) admits them. Run after pushing a release.
set -euo pipefail

readonly EXIT_USAGE=2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
    cat <<'EOF'
Usage: scripts/sign-images.sh [--config FILE] [--env ENV] [--overlay DIR] [IMAGE...]

Signs each IMAGE by digest with cosign v2, the private key in COSIGN_PRIVATE_KEY (its password in
COSIGN_PASSWORD) and no transparency-log upload: exactly as the build step signs the train image.
A tag is resolved to its digest with `crane digest` first, so the signature is for the image
that was pushed, not for whatever the tag points to later.

Without IMAGE it signs the release images of the configuration (tools, serve, MLflow), as listed by
pipelines.platform.kyverno.release_images; --config and --env choose the configuration
(default configs/pipeline.yaml, no overlay).

--overlay DIR (overlays/prod) then pins, in that kustomize overlay's images: and its controller-settings/, the digest
of every image the install set runs by tag (`paddle-mlops pin-images --tagged`: the images signed here, and
upstream's BuildKit, argoexec, Argo Events and NATS images, which are resolved and pinned but not signed: Kyverno
verifies signatures of our registry's images only); commit the overlay directory after a release.

Environment: COSIGN_PRIVATE_KEY, COSIGN_PASSWORD (required; e.g. from the `cosign-signing-key`
Secret), PYTHON (the project's interpreter, default .venv/bin/python). cosign and crane must be on
PATH and logged in to the registry (`cosign login`, `crane auth login`).
EOF
}

die() {
    echo "sign-images: $1" >&2
    exit "${2:-1}"
}

config_args=()
images=()
overlay=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --config | --env)
            [[ $# -ge 2 ]] || die "$1 needs a value (see --help)" "$EXIT_USAGE"
            config_args+=("$1" "$2")
            shift 2
            ;;
        --overlay)
            [[ $# -ge 2 ]] || die "$1 needs a value (see --help)" "$EXIT_USAGE"
            [[ -f "$2/kustomization.yaml" ]] || die "$2 has no kustomization.yaml (see --help)" "$EXIT_USAGE"
            overlay="$(cd "$2" && pwd)"
            shift 2
            ;;
        -*) die "unknown option $1 (see --help)" "$EXIT_USAGE" ;;
        *) images+=("$1"); shift ;;
    esac
done

[[ -n "${COSIGN_PRIVATE_KEY:-}" ]] \
    || die "COSIGN_PRIVATE_KEY is not set: export the private key the build step uses (cosign.key of the cosign-signing-key Secret)"
command -v cosign >/dev/null || die "cosign is not on PATH: install cosign v2 (the tools image pins v2.4.1)"
command -v crane >/dev/null || die "crane is not on PATH: install it from google/go-containerregistry"

# cosign v3 refuses --tlog-upload=false (it wants a signing config) and stores signatures as
# bundles that a Kyverno ClusterPolicy of type Cosign does not read: sign like the build step.
cosign_major="$(cosign version 2>/dev/null | sed -n 's/^GitVersion:[[:space:]]*v\{0,1\}\([0-9][0-9]*\)\..*/\1/p')"
[[ "$cosign_major" == 2 ]] \
    || die "cosign ${cosign_major:+v$cosign_major }is not v2: use cosign v2, as the build step does (images/tools/Dockerfile)"

python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)" || die "no Python to read the configuration: set PYTHON"
if [[ ${#images[@]} -eq 0 ]]; then
    listing="$(cd "$root" && "$python" -c \
        'import sys; from pipelines.platform.kyverno import main; sys.exit(main(sys.argv[1:]))' \
        "${config_args[@]}")" || die "could not list the release images (see the error above)"
    mapfile -t images <<<"$listing"
fi
[[ -n "${images[*]}" ]] || die "no images to sign" "$EXIT_USAGE"

# `repo:tag` or `repo@sha256:…` -> `repo@sha256:…` (a registry port is not a tag).
pin() {
    local ref="$1" repo digest
    if [[ "$ref" == *@sha256:* ]]; then
        echo "$ref"
        return
    fi
    repo="$ref"
    [[ "${ref##*/}" == *:* ]] && repo="${ref%:*}"
    digest="$(crane digest "$ref")" || die "crane could not resolve $ref: is it pushed, and are you logged in?"
    [[ "$digest" == sha256:* ]] || die "crane returned '$digest' for $ref, not a sha256 digest"
    echo "$repo@$digest"
}

for image in "${images[@]}"; do
    [[ -n "$image" ]] || continue
    reference="$(pin "$image")"
    # The flags of steps/build_image.py sign_command (tests/test_sign_images.py keeps them equal).
    cosign sign --yes --tlog-upload=false --key env://COSIGN_PRIVATE_KEY "$reference" \
        || die "cosign could not sign $reference"
    echo "signed $reference"
done

if [[ -n "$overlay" ]]; then
    tagged="$(cd "$root" && "$python" -m paddle_mlops.pin_images --tagged)" \
        || die "could not list the install set's images (see the error above)"
    references=()
    while IFS= read -r image; do
        [[ -n "$image" ]] && references+=("$(pin "$image")")
    done <<<"$tagged"
    (cd "$root" && "$python" -m paddle_mlops.pin_images --overlay "$overlay" "${references[@]}") \
        || die "could not pin the digests in $overlay (see the error above)"
fi

"""`paddle-mlops pin-images`: write pushed release images' digests into a release overlay
(paddle_mlops/release_overlay.py) and its controller settings (`<overlay>/controller-settings/`), or list what a
release pins: the overlay's names, or the images the install set runs by tag (the controllers' own included)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from paddle_mlops.compile import default_compile_config, dump, render_all
from paddle_mlops.release_overlay import (
    DEFAULT_OVERLAY,
    KUSTOMIZATION,
    OverlayError,
    pins,
    read,
    set_digests,
    settings_files,
    tagged_images,
)
from paddle_mlops_core.contracts import EXIT_OK, EXIT_USAGE


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="paddle-mlops pin-images",
        description="Pin release images by digest in a kustomize overlay's images: (what `kustomize edit set image "
        "NAME@sha256:…` writes), after pushing them; `--list` prints the names the overlay pins.",
    )
    p.add_argument("references", nargs="*", metavar="REPOSITORY@sha256:DIGEST", help="pushed images by digest")
    p.add_argument("--overlay", type=Path, default=Path(DEFAULT_OVERLAY), help=f"default {DEFAULT_OVERLAY}")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="print the image names the overlay pins, one per line")
    what.add_argument(
        "--tagged",
        action="store_true",
        help="print the images argo/ runs by tag (name:tag), one per line: what a release resolves to digests",
    )
    return p.parse_args(argv)


def _install_set_tagged() -> list[str]:
    return tagged_images(doc for docs in render_all(default_compile_config()).values() for doc in docs)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        if args.list or args.tagged:
            print("\n".join(_install_set_tagged() if args.tagged else sorted(pins(read(args.overlay)))))
            return EXIT_OK
        if not args.references:
            raise OverlayError("give at least one REPOSITORY@sha256:DIGEST (or --list)")
        for name, digest in set_digests(args.overlay, args.references).items():
            print(f"pinned {name}@{digest} in {args.overlay / KUSTOMIZATION}")
        # The images the controllers give their pods are strings in their settings, out of kustomize's reach.
        for path, docs in settings_files(args.overlay, default_compile_config()).items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(dump(docs), encoding="utf-8")
            print(f"wrote {path}")
    except OverlayError as exc:
        print(f"pin-images: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""A real S3 HTTP endpoint for tests: moto's standalone server on 127.0.0.1 and a free port.

Other test modules use it as `with moto_s3_server() as endpoint:` or through the `s3_endpoint`
fixture defined in their own module; credentials are dummies that moto accepts.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def moto_s3_server(set_env: bool = True) -> Iterator[str]:
    """Start moto's server, yield its endpoint URL (`http://127.0.0.1:<port>`), stop it afterwards.

    With `set_env`, dummy AWS credentials are put in the environment (and restored after) so that
    boto3 never looks for real ones.
    """
    # werkzeug logs every request at INFO; keep test output readable.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    saved = {k: os.environ.get(k) for k in DUMMY_CREDENTIALS}
    if set_env:
        os.environ.update(DUMMY_CREDENTIALS)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        if set_env:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

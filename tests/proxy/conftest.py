"""Async tests run on asyncio through anyio's pytest plugin, as the proxy runs under uvicorn."""

import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"

"""Child process of the HTTP crash test: one streamed ``communicate`` with stream_persist.

Usage: python http_stream_child.py STORE_URL BASE_URL

Prints ``branch <id>`` once the branch exists, then ``done`` if it gets to the end.
"""

from __future__ import annotations

import sys

import anyio

from turnlog.eventstore import open_store
from turnlog.kernel import Branch, iModel
from turnlog.projections import catalogue_upcasters


async def main(url: str, base_url: str) -> None:
    model = iModel(provider="openai", model="gpt-4o-mini", base_url=base_url, api_key="sk-crash-test")
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = await Branch(store=store, chat_model=model).save()
        print(f"branch {branch.id}", flush=True)
        await branch.communicate("Count slowly.", stream=True, stream_persist=True)
        print("done", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])

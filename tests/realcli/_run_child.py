"""Child process of the real-CLI crash tests: one ``Branch.run`` with ``stream_persist``.

Usage: python _run_child.py SPEC_JSON

SPEC: ``{"provider", "executable", "env", "cwd", "store", "persist", "branch_id"?}``. Prints
``branch <id>`` once the branch exists, ``streaming`` once the instruction is recorded, then
``done`` if the run gets to its end.
"""

from __future__ import annotations

import json
import sys

import anyio

from turnlog.eventstore import open_store
from turnlog.kernel import Branch, PersistOptions
from turnlog.kernel.models import ClaudeCodeModel, CodexModel, GeminiModel
from turnlog.projections import catalogue_upcasters

MODELS = {"claude_code": ClaudeCodeModel, "codex": CodexModel, "gemini": GeminiModel}


def model_of(spec: dict) -> object:
    return MODELS[spec["provider"]](
        spec.get("model", ""), executable=spec["executable"], env=spec["env"], cwd=spec["cwd"]
    )


async def main(spec: dict) -> None:
    async with open_store(spec["store"], upcasters=catalogue_upcasters()) as store:
        model = model_of(spec)
        if spec.get("branch_id"):
            branch = await Branch.load(store, spec["branch_id"])
        else:
            branch = await Branch(store=store).save()
        print(f"branch {branch.id}", flush=True)
        options = PersistOptions(batch_chunks=8, batch_ms=20.0)
        async for message in branch.run(
            spec.get("prompt", "Count slowly."),
            chat_model=model,
            stream_persist=True,
            persist_dir=spec["persist"],
            persist_options=options,
        ):
            if message.kind == "Instruction":
                print("streaming", flush=True)
        print("done", flush=True)


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))

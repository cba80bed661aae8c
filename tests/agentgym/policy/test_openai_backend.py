"""The openai backend against `agentgym serve` running in a subprocess, directly and through a faulty proxy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentgym.collector import Collector, Task  # noqa: E402
from agentgym.launch import free_port, serve_model  # noqa: E402
from agentgym.policy.base import BackendError, FinishReason, GenerationRequest, SamplingParams  # noqa: E402
from agentgym.policy.openai import OpenAIBackend  # noqa: E402
from agentgym.trajectory import EpisodeStatus, Failure  # noqa: E402


@pytest.fixture(scope="module")
def server(tiny_dir):
    """`agentgym serve` on the tiny model, in a subprocess; yields its base URL."""
    with serve_model(tiny_dir) as served:
        yield served.url


class FaultyProxy:
    """A TCP proxy in front of the server: each new connection gets the next fault from `plan`.

    Faults: "drop" (read the request, close without answering), "500" (answer
    HTTP 500), "pass" (relay to the server). When the plan runs out, connections pass.
    """

    def __init__(self, upstream_port: int, plan: list[str]):
        self.upstream_port, self.plan, self.seen = upstream_port, list(plan), []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _handle(self, reader, writer):
        fault = self.plan.pop(0) if self.plan else "pass"
        self.seen.append(fault)
        if fault in ("drop", "500"):
            await reader.read(65536)
            if fault == "500":
                body = b'{"error": {"message": "injected"}}'
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                             b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def prompt_ids(tokenizer, text="up or down?"):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                         add_generation_prompt=True, return_dict=False)


async def test_completions_with_token_ids_match_the_hf_backend_exactly(server, tokenizer, tiny_dir):
    from agentgym.policy.hf import HFBackend

    sampling = SamplingParams(max_new_tokens=8, seed=11, temperature=0.8)
    ids = prompt_ids(tokenizer)
    async with OpenAIBackend(f"{server}/v1", tokenizer=tokenizer) as remote:
        [got] = await remote.generate([GenerationRequest("e1", prompt_ids=ids, sampling=sampling)])
        assert remote.model == Path(tiny_dir).name
    local = HFBackend.from_pretrained(tiny_dir)
    [want] = await local.generate([GenerationRequest("e1", prompt_ids=ids, sampling=sampling)])
    assert got.token_ids == want.token_ids and got.text == want.text
    assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    assert got.version == 0 and got.finish_reason == want.finish_reason and got.prompt_tokens == len(ids)


async def test_chat_endpoint_returns_ids_and_logprobs(server, tokenizer):
    async with OpenAIBackend(f"{server}/v1", tokenizer=tokenizer, mode="chat") as remote:
        [done] = await remote.generate([GenerationRequest(
            "c1", messages=[{"role": "user", "content": "hello"}], sampling=SamplingParams(max_new_tokens=5))])
    assert 1 <= len(done.token_ids) == len(done.logprobs) <= 5
    assert all(lp <= 0 for lp in done.logprobs)


async def test_retries_dropped_connections_and_500s_then_succeeds(server, tokenizer):
    port = int(server.rsplit(":", 1)[1])
    async with FaultyProxy(port, ["drop", "500", "drop"]) as proxy:
        async with OpenAIBackend(proxy.url, model="m", tokenizer=tokenizer, backoff_s=0.01) as remote:
            [done] = await remote.generate([GenerationRequest("r1", prompt_ids=prompt_ids(tokenizer),
                                                              sampling=SamplingParams(max_new_tokens=4))])
            assert remote.retries == 3
    assert proxy.seen[:4] == ["drop", "500", "drop", "pass"] and len(done.token_ids) >= 1


async def test_persistent_faults_fail_as_transient_after_the_retry_budget(server, tokenizer):
    port = int(server.rsplit(":", 1)[1])
    async with FaultyProxy(port, ["500"] * 10) as proxy:
        async with OpenAIBackend(proxy.url, model="m", tokenizer=tokenizer, max_retries=2, backoff_s=0.01) as remote:
            with pytest.raises(BackendError, match="failed 3 times; last: HTTP 500") as err:
                await remote.generate([GenerationRequest("r2", prompt_ids=prompt_ids(tokenizer))])
    assert err.value.transient


async def test_client_errors_are_not_retried(server, tokenizer):
    async with OpenAIBackend(f"{server}/v1", model="m", tokenizer=tokenizer) as remote:
        too_long = prompt_ids(tokenizer) * 400  # past the model's 4096-token context
        bad = GenerationRequest("r3", prompt_ids=too_long, sampling=SamplingParams(max_new_tokens=8))
        with pytest.raises(BackendError, match="refused the request.*HTTP 400.*context") as err:
            await remote.generate([bad])
        assert remote.retries == 0 and not err.value.transient


async def test_collector_over_openai_records_exact_ids_and_marks_a_dead_server_as_infra(server, tokenizer):
    async with OpenAIBackend(f"{server}/v1", tokenizer=tokenizer) as remote:
        collector = Collector("Maze-v0", remote, progress=False, max_turns=3,
                              sampling=SamplingParams(max_new_tokens=6, seed=2))
        result = await collector.collect([Task("easy-2", seed=0)], group_size=3)
    for episode in result.episodes:
        assert episode.status == EpisodeStatus.TRUNCATED and episode.num_turns == 3
        for turn in episode.turns:
            assert len(turn.action_ids) == len(turn.action_logprobs) > 0 and turn.info["policy"] == "openai"
    dead = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", model="m", tokenizer=tokenizer, max_retries=1,
                         backoff_s=0.01)
    async with dead:
        [episode] = (await Collector("Maze-v0", dead, progress=False).collect([Task("easy-2", seed=0)])).episodes
    assert episode.status == EpisodeStatus.ERROR and episode.failure == Failure.INFRA
    assert episode.error.startswith("policy failed:") and "ConnectError" in episode.error


async def test_abort_cancels_in_flight_requests(server, tokenizer):
    async with OpenAIBackend(f"{server}/v1", model="m", tokenizer=tokenizer) as remote:
        task = asyncio.ensure_future(remote.generate([GenerationRequest(
            "slow", prompt_ids=prompt_ids(tokenizer), sampling=SamplingParams(max_new_tokens=600, temperature=0))]))
        await asyncio.sleep(0.05)
        remote.abort(["slow"])
        [done] = await task
    assert done.finish_reason == FinishReason.ABORT and done.token_ids == []


def test_served_weights_take_a_resumed_trainers_lower_version(server, tiny_dir):
    """A trainer killed after pushing version 3 resumes from its checkpoint at version 1 and pushes that: the server
    serves version 1 (in-process backends still refuse a version going back)."""
    import httpx

    for version in (3, 1, 0):  # 0 last: the module's server is back where it started
        answer = httpx.post(f"{server}/agentgym/update_weights", json={"path": str(tiny_dir), "version": version},
                            timeout=120)
        assert answer.status_code == 200 and answer.json() == {"version": version}
        assert httpx.get(f"{server}/health", timeout=10).json()["version"] == version

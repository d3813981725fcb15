"""The history store on a real S3-compatible server (moto's server mode, s3fs as fsspec's backend).

- many writers at the same time lose nothing (one object per run, one PUT each);
- two real ``teperf nightly`` shards of one night, run at the same time into ``s3://bucket/history``,
  come back from ``teperf history`` and ``teperf dashboard`` as one complete night; a night whose
  second shard never ran shows as incomplete.

The server runs in this process on a free local port; the shards are subprocesses that reach
it through fsspec's ``FSSPEC_S3_ENDPOINT_URL``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading

import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

from test_history_integration_nightly import ROOT, fixture_repo  # noqa: E402
from test_history_store import make_meta, make_row, summary  # noqa: E402

from teperf.history.store import HistoryStore  # noqa: E402

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a free port; yields the endpoint URL."""
    import fsspec
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved_env = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    saved_conf = fsspec.config.conf.get("s3")
    fsspec.config.conf["s3"] = {
        "endpoint_url": endpoint
    }  # in-process stores; subprocesses get the env variable
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield endpoint
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        if saved_conf is None:
            fsspec.config.conf.pop("s3", None)
        else:
            fsspec.config.conf["s3"] = saved_conf
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def make_bucket(name: str) -> str:
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.mkdir(name)
    return f"s3://{name}/history"


def test_concurrent_writers_lose_nothing(s3):
    url = make_bucket("concurrent")
    writers, per_writer = 8, 3
    start = threading.Barrier(writers)
    errors = []

    def write(w):
        st = HistoryStore(url)  # each writer its own store object, as on its own machine
        try:
            start.wait()
            for k in range(per_writer):
                meta = make_meta(sha=f"{w:x}{k:x}".ljust(40, "0"), started=f"2025-03-0{k + 1}T02:00:00Z")
                st.add_summary(
                    summary(meta, [make_row("Linear"), make_row("LayerNormMLP")]),
                    run_kind="nightly",
                    ref="main",
                    shard=f"{w + 1}/{writers}",
                    bundle=f"w{w}-{k}",
                )
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    st = HistoryStore(url)
    assert st.object_store and len(st.files()) == writers * per_writer
    df = st.read()
    assert len(df) == 2 * writers * per_writer and df.run_id.nunique() == writers * per_writer
    assert not [f for f in st.fs.find(st.root) if f.endswith(".tmp")]  # one PUT each: no temp objects


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("s3nightly")
    return (root, *fixture_repo(root, 3))


def nightly(root, repo, site, config, shard, endpoint, history, night=None):
    i = shard.split("/")[0]
    env = {
        **os.environ,
        **CREDENTIALS,
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
        "PYTHONPATH": str(site),
        "TEPERF_CACHE": str(root / f"cache-{i}"),
    }  # each shard on its own machine: its own cache
    env.pop("TEPERF_ALLOW_DIRTY", None)
    env.pop("TEPERF_HISTORY", None)
    cmd = [
        sys.executable,
        "-m",
        "teperf",
        "nightly",
        "--repo",
        str(repo),
        "--ref",
        "nightly",
        "--package",
        "toyte",
        "--strategy",
        "overlay",
        "--config",
        str(config),
        "--results-dir",
        str(root / f"bundles-{i}"),
        "--format",
        "json",
        "--history",
        history,
        "--shard",
        shard,
        *(["--night", night] if night else []),
    ]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def teperf(*args, endpoint):
    env = {**os.environ, **CREDENTIALS, "FSSPEC_S3_ENDPOINT_URL": endpoint}
    return subprocess.run(
        [sys.executable, "-m", "teperf", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.real_worker
def test_two_shards_at_once_into_s3_are_one_night(s3, repo, tmp_path):
    root, demo, repo_dir, site, shas, config = repo
    history = make_bucket("nightly")
    demo.git(repo_dir, "branch", "-f", "nightly", shas[1])
    procs = [nightly(root, repo_dir, site, config, f"{i}/2", s3, history, night="ci-7") for i in (1, 2)]
    outs = [p.communicate(timeout=600) for p in procs]  # both shards measure and write at the same time
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err

    # the next night: only shard 1/2 ran (its machine's twin never came back)
    demo.git(repo_dir, "branch", "-f", "nightly", shas[2])
    p = nightly(root, repo_dir, site, config, "1/2", s3, history, night="ci-8")
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err

    listed = teperf("history", "--history", history, "--nights", "--format", "json", endpoint=s3)
    assert listed.returncode == 0, listed.stderr
    by_night = {n["night"]: n for n in json.loads(listed.stdout)}
    assert set(by_night) == {"ci-7", "ci-8"}
    assert by_night["ci-7"]["complete"] and by_night["ci-7"]["status"] == "complete (2 of 2 shards)"
    assert (
        by_night["ci-8"]["status"] == "incomplete: 1 of 2 shards (missing 2/2)"
        and not by_night["ci-8"]["complete"]
    )

    rows = teperf("history", "--history", history, "--format", "json", endpoint=s3)
    assert rows.returncode == 0, rows.stderr
    night7 = [r for r in json.loads(rows.stdout) if r["night"] == "ci-7"]
    assert sorted((r["module"], r["shard"]) for r in night7) == [("Block", "1/2"), ("Control", "2/2")]
    assert {r["sha"] for r in night7} == {shas[1]} and {r["base_sha"] for r in night7} == {shas[0]}
    assert {r["night_status"] for r in night7} == {"complete (2 of 2 shards)"}
    assert all(r["host_us"] > 0 and r["status"] == "ok" for r in night7)

    table = teperf("history", "--history", history, endpoint=s3)
    assert table.returncode == 0 and "night ci-8" in table.stdout and "missing 2/2" in table.stdout

    out = tmp_path / "site"
    dash = teperf("dashboard", "--history", history, "--out", str(out), endpoint=s3)
    assert dash.returncode == 0, dash.stderr
    assert "2 cells" in dash.stdout and "night ci-8" in dash.stdout
    index = (out / "index.html").read_text()
    assert "Block" in index and "Control" in index
    assert "Latest night <code>ci-8</code>" in index and "incomplete: 1 of 2 shards (missing 2/2)" in index
    assert "not in night ci-8" in index  # Control's shard did not run on the second night
    page = next(out.glob("machine-*.html")).read_text()
    assert "complete (2 of 2 shards)" in page  # ci-7 in the nights table

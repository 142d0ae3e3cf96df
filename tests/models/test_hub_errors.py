"""A hub id that cannot be fetched is one line of error, whatever huggingface_hub's own message
(several lines for a connection failure or a missing repository) says inside it."""
from __future__ import annotations

import pytest

from dllm.models.hub import hub_snapshot


@pytest.mark.parametrize("online_error", ["unreachable", "not found"])
def test_a_fetch_failure_is_one_line(tmp_path, monkeypatch, online_error):
    import huggingface_hub
    from huggingface_hub.utils import LocalEntryNotFoundError

    def snapshot_download(*, local_files_only=False, **kwargs):
        if local_files_only:
            raise LocalEntryNotFoundError("no snapshot in the cache")
        if online_error == "unreachable":
            raise LocalEntryNotFoundError("ConnectError: name not known\nAn error happened while trying to locate\n"
                                          "the files on the Hub.")
        raise OSError("404 Client Error.\n\nRepository Not Found for url: https://huggingface.co/org/absent.\n"
                      "Please make sure you specified the correct `repo_id`.")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(Exception) as err:
        hub_snapshot("org/absent")
    message = str(err.value)
    assert "\n" not in message, message
    assert ("locate the files on the Hub" if online_error == "unreachable" else "Repository Not Found") in message

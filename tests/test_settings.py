"""One place for settings (vit/settings.py): every variable the code reads is in its table and
in docs/hosting.md's, nothing else in vit/ reads the environment, and what create_app is given
is what the page runs with — the environment untouched."""
import re

from conftest import ROOT

from vit.settings import TABLE, Settings

# Not settings: torchrun's own variables, which it sets for each process it starts
# (vit/training/distributed.py), and the PYTHONPATH a sweep hands on to its runs (vit/sweep/runs.py).
PLUMBING = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PYTHONPATH"}


def test_the_docs_table_lists_every_setting_and_nothing_else():
    text = (ROOT / "docs" / "hosting.md").read_text()
    table = text[text.index("## Settings"):].split("\n\n")[1]
    documented = re.findall(r"^\| `([A-Z_]+)` \|", table, re.M)
    assert documented == [s.env for s in TABLE]


def test_nothing_else_in_vit_reads_the_environment():
    readers = {}
    for path in (ROOT / "vit").rglob("*.py"):
        names = set(re.findall(r"""(?:environ(?:\.get)?[\[(]|getenv\()\s*["']([A-Z_]+)""",
                               path.read_text()))
        if names and path.name != "settings.py":
            readers[str(path.relative_to(ROOT))] = names
    assert all(names <= PLUMBING for names in readers.values()), readers
    # …and app.py only SPACES_ZERO_GPU, which it must see before torch is imported.
    assert set(re.findall(r"""environ\.get\(["']([A-Z_]+)""", (ROOT / "app.py").read_text())) \
        == {"SPACES_ZERO_GPU"}


def test_settings_are_read_once_and_checked():
    s = Settings.from_env({"VIT_QUEUE_SIZE": " 12 ", "VIT_INPAGE": "0", "VIT_HUB_MODELS": "a/b, ,c/d",
                           "SPACE_ID": "me/space", "SPACES_ZERO_GPU": "True"})
    assert (s.queue_size, s.inpage, s.hub_models, s.proxies, s.zero_gpu) == \
        (12, False, ("a/b", "c/d"), 1, True)
    assert Settings.from_env({}) == Settings() and Settings().proxies == 0
    assert Settings.from_env({"SPACE_ID": "x", "VIT_TRUSTED_PROXIES": "0"}).proxies == 0
    # A library function's default reads its own setting: a bad app bound does not stop a command.
    assert Settings.read("device", {"VIT_SESSIONS": "5", "VIT_DEVICE": "cpu"}) == "cpu"
    for env, words in (({"VIT_SESSIONS": "5"}, "VIT_SESSIONS must be between 10"),
                       ({"VIT_MCP": "no"}, "VIT_MCP='no' is not a whole number"),
                       ({"VIT_WARM": "2"}, "VIT_WARM must be between 0 and 1")):
        try:
            Settings.from_env(env)
        except ValueError as e:
            assert str(e).startswith(words) and "\n" not in str(e)
        else:
            raise AssertionError(f"{env} accepted")


def test_the_page_runs_with_the_settings_it_is_given(tmp_path, monkeypatch):
    from test_app_models import tiny

    from vit.ui import create_app
    for s in TABLE:
        monkeypatch.delenv(s.env, raising=False)
    tiny(tmp_path / "ck" / "mnist")
    demo = create_app(tmp_path / "ck", device="cpu",
                      settings=Settings(queue_size=7, inpage=False, sessions=50, unlimited_local=True))
    assert demo._queue.max_size == 7 and demo.limits.sessions == 50
    assert demo.inpage.problem == "turned off (VIT_INPAGE=0)" and demo.limits.identity.unlimited_local

"""Settings as users write them: files by extension, env lists, typos and values that
would quietly switch a feature off."""

from __future__ import annotations

import pytest

from monitor.cli import main
from monitor.settings import KNOWN_REASONS, SettingsError, load, warnings_of


@pytest.mark.parametrize("name, text", [
    ("s.toml", "window_seconds = 30\nslice_dimensions = ['language']\n"),
    ("s.yaml", "window_seconds: 30\nslice_dimensions: [language]\n"),
    ("s.yml", "window_seconds: 30\nslice_dimensions:\n  - language\n"),
    ("s.json", '{"window_seconds": 30, "slice_dimensions": ["language"]}'),
])
def test_a_settings_file_is_read_by_its_extension(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    settings = load(path)
    assert settings.window_seconds == 30 and settings.slice_dimensions == ("language",)


def test_a_settings_file_of_another_kind_or_with_a_typo_says_so(tmp_path):
    other = tmp_path / "settings.ini"
    other.write_text("window_seconds = 30\n")
    with pytest.raises(SettingsError, match=r"\.toml.*\.yaml.*extension"):
        load(other)
    typo = tmp_path / "s.yaml"
    typo.write_text("window_secnds: 30\n")
    with pytest.raises(SettingsError, match="window_secnds: not a ragmon setting; did you "
                                            "mean window_seconds"):
        load(typo)
    broken = tmp_path / "b.yaml"
    broken.write_text("window_seconds: [30\n")
    with pytest.raises(SettingsError, match="is not valid"):
        load(broken)


@pytest.mark.parametrize("written", ["language, risk", '["language", "risk"]'])
def test_env_lists_are_comma_separated_or_a_json_list(monkeypatch, written):
    monkeypatch.setenv("RAGMON_SLICE_DIMENSIONS", written)
    assert load().slice_dimensions == ("language", "risk")


def test_env_values_that_cannot_be_read_name_the_setting(monkeypatch):
    monkeypatch.setenv("RAGMON_SIGNALS", "not json")
    with pytest.raises(Exception, match="signals"):
        load()
    monkeypatch.delenv("RAGMON_SIGNALS")
    monkeypatch.setenv("RAGMON_SLICE_DIMENSIONS", '["language"')
    with pytest.raises(SettingsError, match="slice_dimensions"):
        load()
    monkeypatch.setenv("RAGMON_SLICE_DIMENSIONS", "lang uage")
    with pytest.raises(SettingsError, match="slice dimension 'lang uage'"):
        load()


def test_what_probably_is_a_mistake_is_warned_about(monkeypatch):
    settings = load(reasons="foo", slice_dimensions="")
    found = warnings_of(settings, {"RAGMON_WINDOW_SECOND": "30", "RAGMON_CONFIG": "x",
                                   "RAGMON_CALIBRATION_CACHE": "off", "PATH": "/bin"})
    assert found[0] == ("RAGMON_WINDOW_SECOND is not a ragmon setting and is ignored "
                        "(did you mean RAGMON_WINDOW_SECONDS?)")
    assert "counted as `other`" in found[1] and all(c in found[1] for c in KNOWN_REASONS)
    assert "only release totals" in found[2]
    assert len(found) == 3
    assert warnings_of(load(), {"RAGMON_WINDOW_SECONDS": "30"}) == []


def test_the_cli_warns_once_on_stderr_and_takes_config_after_the_command(
        tmp_path, examples, monkeypatch, capsys):
    monkeypatch.setenv("RAGMON_BATCH_SIZ", "10")
    config = tmp_path / "s.yaml"
    config.write_text("window_seconds: 30\n")
    out = tmp_path / "out.json"
    for args in (["--config", str(config), "replay"], ["replay", "--config", str(config)]):
        assert main([*args, str(examples / "traces.jsonl"), "--no-progress",
                     "--out", str(out)]) == 0
    assert capsys.readouterr().err.count("RAGMON_BATCH_SIZ is not a ragmon setting") == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("window_seconds: -5\n")
    for args in (["--config", str(bad), "replay"], ["replay", "--config", str(bad)]):
        assert main([*args, str(examples / "traces.jsonl"), "--no-progress"]) == 2
        assert "window_seconds=-5" in capsys.readouterr().err


SECRET = "file-secret-5521"


@pytest.mark.parametrize("name", ["sasl_password", "ssl_password"])
def test_a_secret_comes_from_a_file_and_is_never_shown(tmp_path, name):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")  # as `kubectl create secret --from-file` leaves it
    settings = load(**{f"{name}_file": str(path)})
    assert getattr(settings, name).get_secret_value() == SECRET
    assert SECRET not in repr(settings) + str(settings.model_dump())
    problems = []
    for values, expected in (
            ({f"{name}_file": str(tmp_path / "missing")}, "cannot read it"),
            ({f"{name}_file": str(tmp_path / "empty")}, "is empty"),
            ({f"{name}_file": str(path), name: SECRET}, "not both")):
        (tmp_path / "empty").write_text("\n")
        with pytest.raises(SettingsError) as error:
            load(**values)
        assert expected in str(error.value)
        problems.append(str(error.value))
    assert SECRET not in " ".join(problems)


def test_a_sasl_password_file_satisfies_sasl(tmp_path):
    path = tmp_path / "password"
    path.write_text(SECRET)
    settings = load(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
                    sasl_username="ragmon", sasl_password_file=str(path))
    assert settings.sasl_password is not None


def test_a_settings_file_that_is_not_yaml_is_one_line_without_the_line_it_quotes(tmp_path):
    """PyYAML quotes the offending line, which may hold the password."""
    path = tmp_path / "s.yaml"
    path.write_text(f"window_seconds: 3\nsasl_password: {SECRET}: oops\n")
    with pytest.raises(SettingsError) as error:
        load(path)
    message = str(error.value)
    assert "line 2" in message and "\n" not in message
    assert SECRET not in message


def test_the_environment_in_any_case_under_the_values_given(monkeypatch, tmp_path):
    """What pydantic-settings did for us before `settings_files.environment_values`."""
    monkeypatch.setenv("ragmon_window_seconds", "30")  # any case
    monkeypatch.setenv("RAGMON_SIGNALS", '{"latency_like": {"lo": 0, "hi": 20}}')  # a map: JSON
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")  # a setting's alias, no prefix
    settings = load()
    assert settings.window_seconds == 30 and settings.otel_traces_exporter == "otlp"
    assert (settings.signals["latency_like"].lo, settings.signals["latency_like"].hi) == (0, 20)
    path = tmp_path / "s.toml"
    path.write_text("window_seconds = 45\n")
    assert load(path).window_seconds == 45  # a file's value wins over the environment
    assert load(path, window_seconds=15).window_seconds == 15  # and an override over both
    monkeypatch.setenv("RAGMON_SIGNALS", "{not json")
    with pytest.raises(SettingsError, match=r"RAGMON_SIGNALS='\{not json' is not JSON "
                                            r"\(setting signals\)"):
        load()

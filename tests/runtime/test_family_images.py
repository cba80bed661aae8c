"""Which image serves which env: declared at registration, one recipe per family under docker/, none missing."""

from __future__ import annotations

import pytest
from agentgym.sandboxes.images import env_images

import agentgym
from agentgym.errors import ConfigError, RegistrationError
from agentgym.registration import registry
from agentgym.runtime import images


def test_each_builtin_env_names_a_family_image_that_has_a_recipe():
    recipes = images.server_recipes()
    builtin = [env_id for env_id in registry if isinstance(registry[env_id].entry_point, str) and registry[env_id].entry_point.startswith("agentgym.envs.")]
    assert {"Maze-v0", "KeyDoor-v0", "SQL-v0", "Tools-v0", "Browser-v0"} <= set(builtin)
    for env_id in builtin:
        assert images.image_for(env_id) in recipes, f"{env_id}: no docker/{images.image_for(env_id)}/ recipe"
    assert images.image_for("Browser-v0") == "browser"
    assert (images.image_for("Code-v0"), images.image_for("SRE-v0")) == ("code", "sre-env")
    assert images.parent_of(images.recipe("sre-env")) == "sre"  # a sandbox image: the system it serves from inside
    assert images.image_for("Maze-v0") == images.image_for("SQL-v0") == images.GENERIC


def test_the_browser_image_builds_on_the_generic_one_and_installs_chromium_from_debs():
    browser = images.recipe("browser")
    assert images.parent_of(browser) == images.GENERIC and images.parent_of(images.recipe(images.GENERIC)) is None
    assert "chromium" in (browser / "debs.txt").read_text().split()
    assert images.installs_agentgym(browser)


def test_server_recipes_are_not_sandbox_images():
    assert not set(images.server_recipes()) & set(env_images())
    assert "sre" in env_images()


def test_an_unknown_family_and_a_bad_image_name_are_clear_errors():
    with pytest.raises(ConfigError, match="no env server image recipe 'nope'.*known: \\["):
        images.recipe("nope")
    with pytest.raises(RegistrationError, match="image 'Bad Name' must be a docker/<family>/ directory name"):
        agentgym.register("BadImage-v0", "agentgym.envs.maze.env:MazeEnv", image="Bad Name")


def test_a_plugin_env_registers_its_image_next_to_its_registration():
    spec = agentgym.register("ImgTest-v0", "agentgym.envs.maze.env:MazeEnv", image="browser")
    try:
        assert images.image_for("ImgTest-v0") == "browser" and spec.image == "browser"
    finally:
        registry._specs.pop("ImgTest-v0")


def test_the_hash_covers_the_parent_and_the_recipe(tmp_path):
    recipe = tmp_path / "fam"
    recipe.mkdir()
    (recipe / "Dockerfile").write_text(f"ARG PARENT=agentgym/env\nFROM ${{PARENT}}\nLABEL {images.SERVER_LABEL}\n")
    (recipe / "debs.txt").write_text("chromium\n")
    first = images.source_hash(recipe, "sha256:a")
    assert images.source_hash(recipe, "sha256:b") != first
    (recipe / "debs.txt").write_text("chromium\nfonts-liberation\n")
    assert images.source_hash(recipe, "sha256:a") != first
    assert images.parent_of(recipe) == "env" and images.server_recipes(tmp_path) == {"fam": recipe}

"""Where an srt-slurm recipe pointer leads, and what is refused on the way: a path out of the checkout, a file
that is not there, a section the recipe lacks, a selector on a recipe without a base, a zip index past its
lists (recipes/outside/srt_recipe.py)."""

from __future__ import annotations

import pytest

from recipes.outside import srt_recipe

BUNDLE = """\
base: {name: b, roles: {prefill: {args: {tp-size: 8}}}}
override_one: {roles: {prefill: {args: {ep-size: 8}}}}
zip_override_z: {roles: {prefill: {args: {max-running-requests: [1, 2]}}}}
"""


@pytest.fixture
def checkout(tmp_path):
    tree = tmp_path / srt_recipe.MULTI_NODE_TREE / "m"
    tree.mkdir(parents=True)
    (tree / "bundle.yaml").write_text(BUNDLE)
    (tree / "plain.yaml").write_text("name: p\nengine: sglang\n")
    (tmp_path / "configs").mkdir()
    return tmp_path


def test_checkout_is_found_from_its_master_file(checkout):
    assert srt_recipe.checkout_of(checkout / "configs" / "amd-master.yaml") == checkout.resolve()


def test_sections_and_their_merge(checkout):
    _, one = srt_recipe.resolve("recipes/m/bundle.yaml:override_one", checkout)
    assert one == {"name": "b_one", "roles": {"prefill": {"args": {"tp-size": 8, "ep-size": 8}}}}
    _, zipped = srt_recipe.resolve("recipes/m/bundle.yaml:zip_override_z[1]", checkout)
    assert zipped["roles"]["prefill"]["args"]["max-running-requests"] == 2 and zipped["name"] == "b_z_1"
    _, plain = srt_recipe.resolve(f"{srt_recipe.MULTI_NODE_TREE}/m/plain.yaml", checkout)
    assert plain == {"name": "p", "engine": "sglang"}


@pytest.mark.parametrize(
    ("pointer", "said"),
    [
        ("recipes/../../../../etc/passwd.yaml", "leads outside the checkout"),
        ("recipes/m/absent.yaml", "is not in the checkout"),
        (
            "recipes/m/bundle.yaml:override_two",
            "override_two is not a section of the recipe (it has override_one",
        ),
        (
            "recipes/m/bundle.yaml",
            "a bundle needs a selector: base or one of override_one, zip_override_z[0]",
        ),
        ("recipes/m/bundle.yaml:zip_override_z[2]", "zip_override_z has 2 variants (0 to 1)"),
        ("recipes/m/plain.yaml:override_one", "the recipe has no base to merge sections over"),
    ],
)
def test_refusals_say_why(checkout, pointer, said):
    with pytest.raises(srt_recipe.RecipeError, match=None) as err:
        srt_recipe.resolve(pointer, checkout)
    assert said in str(err.value)

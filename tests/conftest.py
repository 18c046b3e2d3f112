"""Fixtures shared by the test files: model paths and small inline models."""

import os
from pathlib import Path

import mujoco
import pytest
from hypothesis import HealthCheck, settings

from tests.models import CARTPOLE_XML, FREEBALL_XML, MODELS_DIR, MODELS_MISSING, PENDULUM_XML

# Property-based tests (Hypothesis): few examples in the README's test command, which has a
# budget of minutes; more in .ci/run's slow leg (HYPOTHESIS_PROFILE=thorough). No deadline: a
# first call compiles, and this machine is shared. Checks that make a Simulator per example
# live with a function-scoped fixture's setup, which is why that health check is off.
settings.register_profile(
  "quick", max_examples=12, deadline=None,
  suppress_health_check=(HealthCheck.function_scoped_fixture, HealthCheck.too_slow))
settings.register_profile(
  "thorough", max_examples=120, deadline=None,
  suppress_health_check=(HealthCheck.function_scoped_fixture, HealthCheck.too_slow))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))

# Playground's locomotion envs read Menagerie's robots: the shared models' folder stands in for a
# Menagerie checkout (the library names no folder of this repository; envs/menagerie.py).
if MODELS_DIR.is_dir():
  os.environ.setdefault("MJBATCH_JAX_MENAGERIE", str(MODELS_DIR))


@pytest.fixture(scope="session")
def models_dir() -> Path:
  """The robot models' folder; a test that asks for it is skipped if it is absent."""
  if not MODELS_DIR.is_dir():
    pytest.skip(MODELS_MISSING)
  return MODELS_DIR


@pytest.fixture
def cartpole():
  return mujoco.MjModel.from_xml_string(CARTPOLE_XML)


@pytest.fixture
def freeball():
  return mujoco.MjModel.from_xml_string(FREEBALL_XML)


@pytest.fixture
def pendulum():
  return mujoco.MjModel.from_xml_string(PENDULUM_XML)

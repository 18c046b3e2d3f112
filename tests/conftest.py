"""Fixtures shared by the test files: model paths and small inline models."""

from pathlib import Path

import mujoco
import pytest

from tests.models import CARTPOLE_XML, FREEBALL_XML, MODELS_DIR, MODELS_MISSING, PENDULUM_XML


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

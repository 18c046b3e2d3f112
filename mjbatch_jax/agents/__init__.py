"""Training agents for mjbatch_jax envs: `mjbatch_jax.agents.ppo` runs Brax's PPO on them.

Importing this package needs nothing beyond mjbatch_jax; training needs the `rl` extra
(`pip install -e '.[rl]'`, Brax 0.14).
"""

"""The team runtime's behaviour version.

``TEAM_RUNTIME_VERSION`` enters every job's runtime condition (and so the shared evaluation
cache's keys and every job id): bump it whenever a change to the teams, prompts, communication
formats, limits or the model layer can change what a team says or submits, so no stale cached
evaluation is reused and no interrupted job resumes under a different runtime.
``tests/protocol/test_code_versions.py`` runs every topology against a scripted model and fails
when the trajectories change while this version does not.
"""

TEAM_RUNTIME_VERSION = "2"  # 2: masked team runs (trajectories record the active agents)

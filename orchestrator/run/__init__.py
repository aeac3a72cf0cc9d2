"""Running a matrix: a session per device (session), one cell at a time (runner), the agent
on the device (agent_client), its tagged line stream (stream) into the store (recorder), and
what happens around cells: cooldown, model pushes (model_push), the model path check
(pathcheck) and what the user sees meanwhile (progress)."""

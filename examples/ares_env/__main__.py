"""``python -m ares_env``: play the tasks and save the loop's records (see ares_env.loop)."""

from ares_env.loop import main

main()

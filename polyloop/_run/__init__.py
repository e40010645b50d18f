"""Running a run: carries out the planner's next move intent first through the ports — the loop,
guards, approvals, resume and checkpoint validity, products, tools, the `Agent`, targets, models."""

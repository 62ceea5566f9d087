"""What the solvers share: job graphs and re-timing (:mod:`.jobs`), the CP-SAT model of a job graph
(:mod:`.cpsat`), LP/MILP helpers (:mod:`.linear`), series points and modules (:mod:`.modules`), identical
devices (:mod:`.symmetry`), an engine's answer (:mod:`.outcome`) and turning a decision into a validated plan
(:mod:`.plans`). Nothing here imports a solver or a baseline.
"""

"""Reports: pictures and pages of plans (Gantt charts, load charts)."""

"""Flow control for the model: the group's rate (GCRA), the model's back-pressure, and
fair turns between tenants, admitted together before each writer call."""

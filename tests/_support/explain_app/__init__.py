"""A module `lg-visibility explain --graph` can name: the incident graph, wrapped and not."""

from __future__ import annotations

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.demo.graphs import INCIDENT_POLICY, incident_builder

raw = incident_builder().compile()
wrapped = with_visibility(raw, INCIDENT_POLICY)
typo = VisibilityPolicy(internal=["router_subgrah"])
not_a_policy = {"internal": ["router_subgraph"]}

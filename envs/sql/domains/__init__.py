"""The generated databases of SQL-v0, one module per domain (tables, seeded rows, question templates)."""

from __future__ import annotations

from agentgym.envs.sql.dataset import Domain
from agentgym.envs.sql.domains import flights, hr, library, school, shop

DOMAINS: dict[str, Domain] = {d.name: d for d in (shop.DOMAIN, school.DOMAIN, library.DOMAIN,
                                                 flights.DOMAIN, hr.DOMAIN)}

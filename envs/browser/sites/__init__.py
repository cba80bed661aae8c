"""The local task sites of Browser-v0, by name."""

from __future__ import annotations

from agentgym.envs.browser.sites.base import Site
from agentgym.envs.browser.sites.forms import FormsSite
from agentgym.envs.browser.sites.mail import MailSite
from agentgym.envs.browser.sites.shop import ShopSite

SITES: dict[str, type[Site]] = {site.name: site for site in (ShopSite, FormsSite, MailSite)}

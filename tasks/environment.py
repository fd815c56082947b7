"""A task's own container environment (a Harbor task's ``environment/``): its image, limits,
health check, the compose services beside it, its skills and MCP servers."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tasks.mcp import McpServer


class Healthcheck(BaseModel):
    """A shell command run in the sandbox until it exits 0 (Docker's health check)."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="Shell command; exit 0 is healthy.")
    interval_s: float = Field(default=5.0, gt=0, description="Seconds between checks.")
    timeout_s: float = Field(default=30.0, gt=0, description="Most seconds one check runs.")
    start_period_s: float = Field(
        default=0.0, ge=0, description="Seconds of start-up during which failures do not count."
    )
    retries: int = Field(default=3, ge=1, description="Failures in a row that mean unhealthy.")


class ComposeService(BaseModel):
    """A service container beside the agent's (a Harbor task's ``docker-compose.yaml``): it
    shares the agent's network namespace (loopback only), reached by its name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="Its host name.")
    image: str | None = Field(default=None, description="A local image (or an alias's).")
    context: str | None = Field(default=None, description="Host path of its build context.")
    dockerfile: str = Field(default="Dockerfile", description="Its Dockerfile, in the context.")
    env: dict[str, str] = Field(default_factory=dict, description="Its environment.")
    command: list[str] | None = Field(default=None, description="Its command (None: CMD).")
    entrypoint: list[str] | None = Field(default=None, description="None: its ENTRYPOINT.")
    healthcheck: Healthcheck | None = Field(default=None, description="Waited for, if any.")


class Environment(BaseModel):
    """A task that brings its own container image (a Harbor task's ``environment/``): it runs
    only in the docker backend, from an image built from ``dockerfile`` in ``context`` (its
    ``FROM`` resolved to a local image: :mod:`forge.images.task`), in ``workdir``."""

    model_config = ConfigDict(extra="forbid")

    context: str = Field(description="Host path of the build context (the Dockerfile's folder).")
    dockerfile: str = Field(default="Dockerfile", description="The Dockerfile, in the context.")
    workdir: str = Field(
        default="/app",
        pattern=r"^/",
        description="Where the agent works (its workspace): the Dockerfile's last WORKDIR.",
    )
    image: str | None = Field(
        default=None, description="A prebuilt image to start from instead of the Dockerfile."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    build_timeout_s: float = Field(default=600.0, gt=0, description="Most seconds a build takes.")
    cpus: float | None = Field(default=None, gt=0, description="CPUs (None: sandbox.cpus).")
    memory_mb: int | None = Field(
        default=None, ge=64, description="Memory limit in MiB (None: sandbox.memory_mb)."
    )
    storage_mb: int | None = Field(
        default=None,
        ge=1,
        description="Disk in MiB of each writable temp place (/tmp, /var/tmp, the home; "
        "None: sandbox.disk_mb); the image's own layer has the daemon's limit.",
    )
    agent_user: str | None = Field(
        default=None,
        description="Who the harness runs as (a name or UID[:GID]; Harbor's agent.user); "
        "None: the backend's default for a task image.",
    )
    healthcheck: Healthcheck | None = Field(
        default=None,
        description="A command that must pass before the attempt starts (Harbor's "
        "[environment.healthcheck]); the image's own HEALTHCHECK is waited for as well.",
    )
    services: list[ComposeService] = Field(
        default_factory=list,
        description="Containers started beside the agent's for the attempt (a Harbor task's "
        "docker-compose.yaml), healthy before it starts, removed with it.",
    )
    skills_dir: str | None = Field(
        default=None,
        pattern=r"^/",
        description="A folder in the image whose subfolders are skills (a SKILL.md each), "
        "offered to the harness in its own way (Harbor's skills_dir).",
    )
    mcp_servers: list[McpServer] = Field(
        default_factory=list,
        description="MCP servers the task offers the agent (Harbor's mcp_servers): "
        "given to harnesses that take MCP servers; other harnesses leave the task out.",
    )

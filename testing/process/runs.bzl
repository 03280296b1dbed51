"""One suite's runs in real processes (testing/process/BUILD)."""

def _env_for(backend, env, harness):
    return dict(env, HARNESS_BACKEND = backend) if harness else env

def process_runs(prefix, binary, ranks, extra = [], env = {}, harness = False, torchrun = False):
    """`binary` in `ranks` processes: mpi under mpirun, gloo under engine-launch.

    Makes <prefix>mpi_<ranks>[_<extra>...]_test and <prefix>gloo_..._test, and
    with `torchrun` <prefix>torchrun_gloo_<ranks>_test under Debian's torchrun
    (whose agent hosts the store).

    Args:
      prefix: the start of every test's name.
      binary: the test binary's label.
      ranks: how many processes.
      extra: arguments after the backend's name; they also end the names.
      env: the tests' environment.
      harness: the binary links testing/harness and learns its backend from
        HARNESS_BACKEND (which switches it to process mode); the others take
        it as their first argument.
      torchrun: also under torchrun.
    """
    suffix = "".join(["_" + a for a in extra])

    native.sh_test(
        name = "%smpi_%d%s_test" % (prefix, ranks, suffix),
        size = "medium",
        srcs = ["run_mpirun.sh"],
        args = [str(ranks), "$(location %s)" % binary, "mpi"] + extra,
        data = [binary],
        env = _env_for("mpi", env, harness),
    )
    native.sh_test(
        name = "%sgloo_%d%s_test" % (prefix, ranks, suffix),
        size = "medium",
        srcs = ["run_launched.sh"],
        args = [
            "$(location //tools/launch:engine-launch)",
            "--nproc-per-node",
            str(ranks),
            "$(location %s)" % binary,
            "gloo",
        ] + extra,
        data = [binary, "//tools/launch:engine-launch"],
        env = _env_for("gloo", env, harness),
    )
    if torchrun:
        native.sh_test(
            name = "%storchrun_gloo_%d%s_test" % (prefix, ranks, suffix),
            size = "medium",
            srcs = ["run_torchrun.sh"],
            args = ["$(rootpath @libtorch//:torchrun)", str(ranks), "$(location %s)" % binary, "gloo"] + extra,
            data = [binary, "@libtorch//:torchrun"],
            env = _env_for("gloo", env, harness),
        )

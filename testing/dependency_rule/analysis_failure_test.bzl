"""A test that passes only if analysing a target fails with a given message.

Bazel checks the dependency rule (and visibility, testonly, ...) while it
analyses a build; a rule that holds makes a forbidden target fail to build.
This test builds such a target in a configuration that records analysis
failures instead of stopping on them, and checks the recorded message.
"""

def _analysis_failure_test_impl(ctx):
    target = ctx.attr.target[0]
    if AnalysisFailureInfo not in target:
        return [AnalysisTestResultInfo(
            success = False,
            message = "%s was analysed without error; expected one containing: %s" %
                      (target.label, ctx.attr.message),
        )]
    messages = [cause.message for cause in target[AnalysisFailureInfo].causes.to_list()]
    found = [message for message in messages if ctx.attr.message in message]
    return [AnalysisTestResultInfo(
        success = len(found) > 0,
        message = "expected an analysis error containing: %s\ngot:\n%s" %
                  (ctx.attr.message, "\n".join(messages)),
    )]

analysis_failure_test = rule(
    implementation = _analysis_failure_test_impl,
    attrs = {
        "target": attr.label(cfg = analysis_test_transition(
            settings = {"//command_line_option:allow_analysis_failures": "True"},
        )),
        "message": attr.string(mandatory = True),
    },
    analysis_test = True,
    test = True,
)

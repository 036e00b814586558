package main

import "errors"

// Exit statuses, one table for every subcommand (exitStatusHelp, shown in
// --help; docs/flags.md).
const (
	exitOK = 0
	// exitFailure is a failure while doing the work, or a node or cluster
	// that cannot be served: the kernel, the API server (unreachable,
	// refusing the credentials), I/O; recover's removal that failed;
	// explain's kernel that differs from the plan.
	exitFailure = 1
	// exitUsage is bad input: an invalid or unknown flag, a missing
	// required flag, a file that cannot be read or decoded, a field the
	// configuration's kind does not have, a mode ipvs-proxy does not serve.
	exitUsage = 2
	// exitFound is recover's dry run that found bad addresses and changed
	// nothing.
	exitFound = 3
)

// exitStatusHelp is the table of exit statuses, as --help prints it.
const exitStatusHelp = `Exit status (every subcommand): 0 done (recover: nothing bad found, or
--apply removed it all); 1 failed (kernel, API server unreachable or refusing
the credentials, I/O, a removal that failed, recover --apply refusing an API
server that does not list this node, explain --kernel finding the kernel
differs from the plan); 2 bad usage (flag, file, configuration field, mode,
a Service explain does not find); 3 recover's dry run found bad addresses,
nothing changed.`

// failureError marks an error as a failure of the work itself (exit 1)
// rather than bad input (exit 2, the default for every other error).
type failureError struct{ err error }

func (e failureError) Error() string { return e.err.Error() }
func (e failureError) Unwrap() error { return e.err }

// failure wraps err so that the process exits with status 1. Errors not
// wrapped with failure are treated as bad input and exit with status 2.
func failure(err error) error {
	if err == nil {
		return nil
	}
	return failureError{err}
}

// exitStatus is an error carrying its own exit status and the one line
// Main prints; Main returns its code instead of 1 or 2.
type exitStatus struct {
	code int
	msg  string
}

func (e exitStatus) Error() string { return e.msg }

// ExitCode is the process exit status.
func (e exitStatus) ExitCode() int { return e.code }

// exitCode is the exit status for err returned by a subcommand.
func exitCode(err error) int {
	if es, ok := errors.AsType[exitStatus](err); ok {
		return es.ExitCode()
	}
	if errors.As(err, new(failureError)) {
		return exitFailure
	}
	return exitUsage
}

package brokerplug

import "time"

// DevProcess is one process of a broker in the local development stack
// (deploy/devstack runs it, started by `make run` and `make test`): a JVM
// whose classpath is the runtime closure of Maven Central artifacts, with
// its configuration files, a one-time set-up step and the ports it
// listens on. A plug describes its processes with Plug.DevStack, so the
// dev stack runs a new broker without naming it.
//
// In every string of a DevProcess (options, arguments, file contents,
// Setup) the placeholder DirPlaceholder stands for the process's own
// directory, an absolute path the stack owns: its working directory,
// where Files are written and where the broker keeps its data and logs.
type DevProcess struct {
	// Name is the component's name in the stack's status, logs and
	// `down NAME`: lower case, unique in the stack.
	Name string
	// Maven lists the artifacts (groupId:artifactId:version) whose
	// runtime dependencies, resolved from Maven Central, are the
	// classpath.
	Maven []string
	// Main is the main class. A live process whose command line holds it
	// and whose working directory is the process's directory is the
	// stack's own; the stack signals no other.
	Main string
	// JVMOptions are the JVM's options (heap, GC, system properties).
	JVMOptions []string
	// Args are Main's arguments.
	Args []string
	// Files are written into the directory before every start.
	Files []DevFile
	// Setup, when set, runs once before the first start (until its
	// Creates exists), for example to format the broker's storage.
	Setup *DevSetup
	// Ports are the loopback ports the process listens on, its main port
	// first. It is ready when every one accepts connections; the stack
	// refuses to start it while one is taken.
	Ports []int
	// StartTimeout bounds the wait for readiness after a start.
	StartTimeout time.Duration
	// StopTimeout bounds the wait after SIGTERM before the stack kills
	// the process (SIGKILL); zero means 60 s.
	StopTimeout time.Duration
	// Env is what the stack exports for services and tests to reach the
	// process (KEY=value), usually the plug's address setting.
	Env []string
}

// DirPlaceholder stands for a DevProcess's directory in its strings.
const DirPlaceholder = "{{dir}}"

// DevFile is a file of a DevProcess's directory: its name there and its
// content.
type DevFile struct {
	Name    string
	Content string
}

// DevSetup is a DevProcess's one-time set-up: Main (a class on the same
// classpath) run with Args, to completion, while the file Creates (a path
// in the directory) does not exist; it must create it.
type DevSetup struct {
	Main    string
	Args    []string
	Creates string
}

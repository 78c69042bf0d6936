//go:build !unix

package tenure

import "os/exec"

// inOwnGroup: process groups are a Unix notion; elsewhere only the command
// itself is killed when its context ends.
func inOwnGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) {}

// Command tenure runs a command on exactly one replica at a time, using
// leases in a shared store. See internal/cli for the commands.
package main

import (
	"os"

	"github.com/tenure-dev/tenure/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }

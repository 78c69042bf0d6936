package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// ProcState is pid's state letter as /proc/PID/stat shows it ('R', 'S',
// 'T' when stopped, 'Z' when a zombie), or 0 when it is gone.
func ProcState(pid int) byte {
	fields, ok := procStat(pid)
	if !ok || len(fields) < 1 || len(fields[0]) != 1 {
		return 0
	}
	return fields[0][0]
}

// Alive reports whether pid exists and is neither a zombie nor dead.
func Alive(pid int) bool {
	s := ProcState(pid)
	return s != 0 && s != 'Z' && s != 'X'
}

// ParentPid reads pid's parent from /proc; it fails the test when pid is
// gone.
func ParentPid(t testing.TB, pid int) int {
	t.Helper()
	fields, ok := procStat(pid)
	if ok && len(fields) >= 2 {
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			return ppid
		}
	}
	t.Fatalf("/proc/%d/stat: cannot read its parent", pid)
	return 0
}

// procStat is /proc/PID/stat after the command name, which may hold spaces
// and parentheses itself: the state is the first field, the parent the
// second.
func procStat(pid int) ([]string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}

package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ticksPerSecond is USER_HZ, the unit of the CPU times in /proc/stat and
// /proc/<pid>/stat. The kernel fixes it at 100 on every architecture Go
// supports on Linux (sysconf(_SC_CLK_TCK) reports the same constant), and
// reading it properly would need cgo.
const ticksPerSecond = 100

// machineCPU is the cpu line of /proc/stat: time spent by all CPUs, in
// ticks.
type machineCPU struct {
	// Busy is user + nice + system + irq + softirq: work done on this
	// machine. Idle and iowait are not work; steal is another guest's;
	// guest time is already inside user.
	Busy uint64
	// Total adds idle, iowait and steal.
	Total uint64
}

// parseMachineCPU reads the aggregate "cpu " line of /proc/stat.
func parseMachineCPU(data []byte) (machineCPU, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return machineCPU{}, fmt.Errorf("cpu line of /proc/stat has %d fields, want at least 9", len(f))
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return machineCPU{}, fmt.Errorf("parsing cpu field %d of /proc/stat: %w", i+1, err)
			}
			v[i] = n
		}
		user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		busy := user + nice + system + irq + softirq
		return machineCPU{Busy: busy, Total: busy + idle + iowait + steal}, nil
	}
	return machineCPU{}, errors.New("no cpu line in /proc/stat")
}

func readMachineCPU() (machineCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	return parseMachineCPU(data)
}

// pidStat is what the benchmark reads from /proc/<pid>/stat.
type pidStat struct {
	Comm  string
	PPID  int
	Ticks uint64 // utime + stime
	// Start is the process start time in ticks after boot: with the pid it
	// identifies a process, since pids are reused.
	Start uint64
}

// parsePidStat parses /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so the fields
// after it are found from the last ')'.
func parsePidStat(data []byte) (pidStat, error) {
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return pidStat{}, errors.New("no command name in parentheses")
	}
	rest := strings.Fields(string(data[end+1:]))
	// rest[0] is field 3 (state); utime and stime are fields 14 and 15,
	// starttime field 22.
	if len(rest) < 20 {
		return pidStat{}, fmt.Errorf("%d fields after the command name, want at least 20", len(rest))
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return pidStat{}, fmt.Errorf("parsing ppid: %w", err)
	}
	var nums [3]uint64
	for i, idx := range []int{11, 12, 19} {
		if nums[i], err = strconv.ParseUint(rest[idx], 10, 64); err != nil {
			return pidStat{}, fmt.Errorf("parsing field %d: %w", idx+3, err)
		}
	}
	return pidStat{Comm: string(data[open+1 : end]), PPID: ppid, Ticks: nums[0] + nums[1], Start: nums[2]}, nil
}

func readPidStat(pid int) (pidStat, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return pidStat{}, err
	}
	st, err := parsePidStat(data)
	if err != nil {
		return pidStat{}, fmt.Errorf("parsing /proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// parseKB returns the value in kB of the line "key:   1234 kB" in a
// /proc status or smaps_rollup file, and whether the key was there.
func parseKB(data []byte, key string) (uint64, bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != key {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			return 0, true, fmt.Errorf("%s has no value", key)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, true, fmt.Errorf("parsing %s: %w", key, err)
		}
		return n, true, nil
	}
	return 0, false, nil
}

// readRSS returns the resident set size of pid in kB (VmRSS). A kernel
// thread or a zombie has none, which reads as 0.
func readRSS(pid int) (uint64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	kb, _, err := parseKB(data, "VmRSS")
	return kb, err
}

// readPSS returns the proportional set size of pid in kB: its private
// pages plus its share of the pages it shares (Postgres' shared buffers,
// the binary's text). Summed over the processes of a server it counts each
// page once, where summed RSS would count shared buffers once per backend.
// It needs the right to read /proc/<pid>/smaps_rollup (the same user, or
// root); ok is false when that is refused.
func readPSS(pid int) (kb uint64, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if errors.Is(err, os.ErrPermission) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	kb, found, err := parseKB(data, "Pss")
	if err != nil || !found {
		return 0, false, err
	}
	return kb, true, nil
}

// childPIDs returns the children of pid, from the children file of each of
// its threads (a child belongs to the thread that forked it).
func childPIDs(pid int) ([]int, error) {
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", t.Name(), "children"))
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

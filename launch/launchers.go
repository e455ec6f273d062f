package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// launcherNames are the launcher names a Request accepts, by family: "openmpi" (Open MPI's
// mpirun: MPIR up to 4.x, PRRTE from 5.0), "prrte" (PRRTE's own launchers), "hydra" (MPICH),
// "srun" (Slurm), "bgq" (Blue Gene/Q's runjob, or the emulated system's); "" is the family of
// what the name resolves to.
var launcherNames = map[string]string{
	"mpirun": "", "mpiexec": "", "orterun": "openmpi", "mpirun.openmpi": "openmpi", "mpiexec.openmpi": "openmpi",
	"prterun": "prrte", "prte": "prrte", "prun": "prrte",
	"mpiexec.hydra": "hydra", "hydra": "hydra", "mpirun.mpich": "hydra", "mpiexec.mpich": "hydra", "srun": "srun",
	"runjob": "bgq", EmulatedRunjob: "bgq",
}

// familyOf says which family an executable's base name belongs to ("" : none).
func familyOf(base string) string {
	if f := launcherNames[base]; f != "" {
		return f
	}
	if strings.HasPrefix(base, "mpiexec.hydra") {
		return "hydra"
	}
	return ""
}

// IsLauncher reports whether an executable (a name or a path) is one of the parallel
// launchers known here, by its base name.
func IsLauncher(path string) bool {
	base := filepath.Base(path)
	_, known := launcherNames[base]
	return known || familyOf(base) != ""
}

// CheckLauncher validates a launcher name other than the local one: a known launcher name (or
// a path to one) that can be found.
func CheckLauncher(name string) error {
	if _, ok := launcherNames[filepath.Base(name)]; !ok {
		return fmt.Errorf(`launcher %q: want "local", "mpirun", "prterun", "prun", "mpiexec.hydra", "srun" or "runjob" (or mpirun.openmpi, mpiexec.mpich, a path to one of them)`, name)
	}
	if name == "runjob" || name == EmulatedRunjob {
		return nil // runjob on PATH, else the emulated system's beside the agent's binary (bgqRunjob)
	}
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("launcher %q: not found (%v): install Open MPI, MPICH or Slurm, or give its path", name, errors.Unwrap(err))
	}
	return nil
}

// launcherFamily says which launcher a name is: "openmpi", "prrte", "hydra", "srun" or ""
// when not known.
func launcherFamily(name string) string {
	if f := familyOf(filepath.Base(name)); f != "" {
		return f
	}
	_, family, _ := launcherPath(name)
	return family
}

// launcherPath resolves a launcher name to its executable and says which family it is (""
// when what it resolves to is no launcher known here).
func launcherPath(name string) (path, family string, err error) {
	path = name
	if !strings.Contains(name, "/") {
		if path, err = lookPath(name); err != nil {
			return "", "", fmt.Errorf("launch: launcher %s: %w", name, err)
		}
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", "", fmt.Errorf("launch: launcher %s: %w", name, err)
	}
	return path, familyOf(filepath.Base(real)), nil
}

// labelArgs ask a launcher to label each line of its ranks' output with the rank. Open MPI's
// mpirun takes --tag-output in 4.x and 5.x alike; PRRTE's launchers take --output tag.
func labelArgs(launcher string) []string {
	switch family := launcherFamily(launcher); family {
	case "openmpi":
		return []string{"--tag-output"}
	case "prrte":
		return []string{"--output", "tag"}
	case "hydra":
		return []string{"-prepend-rank"}
	case "srun":
		return []string{"--label"}
	}
	return nil
}

// launcherLabel reads the rank labels launchers put on their ranks' output lines: Open MPI's
// --tag-output ("[1,3]<stdout>:"), hydra's -prepend-rank ("[3] ") and srun's --label ("3: ").
var launcherLabel = regexp.MustCompile(`^(?:\[\d+,(\d+)\]<(stdout|stderr|stddiag)>:|\[(\d+)\] |\s*(\d+): )`)

// relabel turns a launcher's labelled line into the form "[3] text" and its category.
func relabel(line string) (category, text string) {
	m := launcherLabel.FindStringSubmatchIndex(line)
	if m == nil {
		return "stdout", line
	}
	sub := func(i int) string {
		if m[2*i] < 0 {
			return ""
		}
		return line[m[2*i]:m[2*i+1]]
	}
	rank := sub(1) + sub(3) + sub(4)
	category = "stdout"
	if s := sub(2); s == "stderr" || s == "stddiag" {
		category = "stderr"
	}
	return category, "[" + rank + "] " + line[m[1]:]
}

// FollowOutput follows the launcher's output file (App.OutputPath of a job launched with
// Request.LabelOutput) and sends each line, relabelled "[rank] text", with its category
// ("stdout" or "stderr"), until ctx ends, or stop is closed and the file has no more to give.
func FollowOutput(ctx context.Context, path string, stop <-chan struct{}, send func(category, text string)) {
	var f *os.File
	for f == nil {
		var err error
		if f, err = os.Open(path); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var partial string
	stopping := false
	for {
		line, err := br.ReadString('\n')
		if err == nil || (line != "" && stopping) {
			cat, text := relabel(partial + line)
			partial = ""
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			send(cat, text)
			continue
		}
		partial += line
		if err != io.EOF {
			return
		}
		if stopping {
			if partial != "" {
				cat, text := relabel(partial)
				send(cat, text+"\n")
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			stopping = true // one more pass to the end of the file
		case <-time.After(50 * time.Millisecond):
		}
	}
}

package adapter

import (
	"debug/elf"
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/arch"
)

// Power programs under emulation. A launch with "emulator": "qemu-ppc64" (big-endian ELFv1)
// or "qemu-ppc64le" (little-endian ELFv2) starts the local agents with the GDB remote-protocol
// back end (`hpcdap agent --backend rsp --emulator NAME`), which runs each rank under QEMU
// user mode with its GDB stub. The agent finds the emulator (agent.FindEmulator: QEMU ≥ 9 from
// scripts/qemu-user.sh's cache first, then $PATH) and reports the machine with GetTargetInfo;
// from there the session is the same as for a native program: symbols, CFI and the register
// scope follow the rank's machine, disassembly decodes Power instructions.

// checkEmulator validates "emulator" against the rest of the launch arguments: the program
// must be a 64-bit Power executable of the emulator's byte order.
func checkEmulator(name, program string, local bool, coreFile string) error {
	switch {
	case !local:
		return fmt.Errorf(`emulator %q: only the local launcher runs ranks under emulation`, name)
	case coreFile != "":
		return errors.New(`"emulator" has no meaning with "coreFile"`)
	}
	f, err := elf.Open(program)
	if err != nil {
		return fmt.Errorf("emulator %q: program %s: %v", name, program, err)
	}
	defer f.Close()
	// qemu-ppc64 runs the machine named ppc64, qemu-ppc64le the one named ppc64le.
	if a, err := arch.For(f.Machine, f.ByteOrder); err != nil || "qemu-"+a.Name != name {
		return fmt.Errorf("emulator %q: program %s is %v %v, not a 64-bit Power executable of that byte order",
			name, program, f.Machine, f.ByteOrder)
	}
	return nil
}

// emulatorAgentArgs are the agent options that select the emulated back end for plan.
func emulatorAgentArgs(plan *launchPlan) []string {
	if plan.emulator == "" {
		return nil
	}
	return []string{"--backend", "rsp", "--emulator", plan.emulator}
}

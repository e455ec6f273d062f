package cdti

import "debug/elf"

// cmdSample is a command with every field set, and the sizes the spec gives for it (§7.3, §7.4,
// and the extension layouts of ext.go).
type cmdSample struct {
	cmd     Command
	size    int // descriptor length of the command
	ackSize int // AckSize: the spec's ack size (+ n for variable acks)
}

type ackSample struct {
	ack  Ack
	size int
}

func seq64(n int, base uint64) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = base + uint64(i)*0x0101010101
	}
	return s
}

func fillQPX(n int) (f [32]QPX) {
	for i := range f {
		f[i] = QPX{uint64(n + i), uint64(n+i) << 8, uint64(n+i) << 16, uint64(n+i) << 24}
	}
	return f
}

var (
	sampleSRegs = SpecialRegs{IAR: 0x1000010, LR: 2, MSR: 3, CR: 4, CTR: 5, XER: 6, FPSCR: 7, DEAR: 8, ESR: 9}
	sampleDRegs = DebugRegs{DBCR0: 1, DBCR1: 2, DBCR2: 3, DBCR3: 4, DAC1: 5, DAC2: 6, DAC3: 7, DAC4: 8, IAC1: 9,
		IAC2: 10, IAC3: 11, IAC4: 12, DBSR: 13}
	sampleGPR = [32]uint64(seq64(32, 0x1000))
	sampleFPR = fillQPX(7)
)

func commandSamples() []cmdSample {
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	return []cmdSample{
		{&GetSpecialRegs{ThreadID: 11}, 8, 80},
		{&GetGeneralRegs{ThreadID: 12}, 8, 264},
		{&GetFloatRegs{ThreadID: 13}, 8, 1032},
		{&GetDebugRegs{ThreadID: 14}, 8, 112},
		{&GetMemory{ThreadID: 15, Addr: 0x10000000, Length: 300, SpecAccess: SpecAccessForceNonSpeculative}, 24, 24 + 300},
		{&GetThreadList{ThreadID: 16}, 8, 8208},
		{&GetAuxVectors{ThreadID: 17}, 8, 272},
		{&GetProcessData{ThreadID: 18}, 8, 128},
		{&GetThreadData{ThreadID: 19}, 8, 6472},
		{&GetPreferences{ThreadID: 20}, 8, 24},
		{&GetFilenames{ThreadID: 21}, 8, 32784},
		{&GetFileStatData{ThreadID: 22, Pathname: "/persist/data.bin"}, 136, 152},
		{&GetFileContents{ThreadID: 23, Pathname: "/persist/x", Offset: 4096, NumBytes: 777}, 152, 16 + 777},
		{&SetGeneralReg{ThreadID: 24, Reg: 31, Value: 0xdeadbeefcafe}, 24, 8},
		{&SetFloatReg{ThreadID: 25, Reg: 3, Value: QPX{1, 2, 3, 4}}, 48, 8},
		{&SetDebugReg{ThreadID: 26, Reg: RegDAC2, Value: 0x77}, 24, 8},
		{&SetMemory{ThreadID: 27, Addr: 0x2000, SpecAccess: SpecAccessForceNonSpeculative, SharedMemory: SharedMemoryAllow,
			Data: data}, 32 + len(data), 24},
		{&HoldThread{ThreadID: 28}, 8, 8},
		{&ReleaseThread{ThreadID: 29}, 8, 8},
		{&InstallTrapHandler{ThreadID: 30, Handler: 0x10020000}, 16, 8},
		{&AllocateMemory{ThreadID: 31, Size: 1 << 20}, 16, 16},
		{&SendSignal{ThreadID: 32, Signal: 10}, 16, 8},
		{&ContinueProcess{ThreadID: 33}, 8, 8},
		{&StepThread{ThreadID: 34}, 8, 8},
		{&SetBreakpoint{ThreadID: 35, Addr: 0x1000100, Instruction: 0x7d821008}, 24, 8},
		{&ResetBreakpoint{ThreadID: 36, Addr: 0x1000100, Instruction: 0x60000000}, 24, 8},
		{&SetWatchpoint{ThreadID: 37, Addr: 0x3000, Length: 8, Type: WatchReadWrite}, 24, 40},
		{&ResetWatchpoint{ThreadID: 38, Addr: 0x3000}, 16, 40},
		{&RemoveTrapHandler{ThreadID: 39}, 8, 8},
		{&SetPreferences{ThreadID: 40, BreakpointMode: FastBreakEnable, WatchpointMode: FastWatchDisable,
			DACMode: TrapAfterDAC}, 24, 8},
		{&FreeMemory{ThreadID: 41, Addr: 0x4000, Size: 4096}, 24, 8},
		{&SetSpecialReg{ThreadID: 42, Reg: RegLR, Value: 0x1000abc}, 24, 8},
		{&SetGeneralRegs{ThreadID: 43, GPR: sampleGPR}, 264, 8},
		{&SetFloatRegs{ThreadID: 44, FPR: sampleFPR}, 1032, 8},
		{&SetDebugRegs{ThreadID: 45, Regs: sampleDRegs}, 112, 8},
		{&SetSpecialRegs{ThreadID: 46, Regs: sampleSRegs}, 80, 8},
		{&ReleaseControl{ThreadID: 47, Notify: ReleaseActive}, 16, 8},
		{&SetContinuationSignal{ThreadID: 48, Signal: 11}, 16, 8},
		{&SendSignalToProcess{ThreadID: 49, Signal: 15}, 16, 8},
		{&GetTargetInfo{ThreadID: 50}, 8, 24 + MaxExePathSize},
		{&GetRegisterSet{ThreadID: 51, Set: RegSetFloat, MaxLength: 512}, 16, 16 + 512},
		{&GetTraceback{ThreadID: 52, MaxFrames: 64}, 16, 16 + 16*64},
		{&EvaluateValue{ThreadID: 59, Format: 1, Program: data, Modules: []string{"", "/lib/libc.so.6"}},
			16 + len(data) + 2 + 2 + len("/lib/libc.so.6"), 16 + MaxValueText},
		{&GetModuleMemory{ThreadID: 60, Module: "/lib/libc.so.6", Offset: 0xffffffffffe01000, Length: 512, SpecAccess: SpecAccessUseThreadState},
			24 + len("/lib/libc.so.6"), 24 + 512},
		{&GetModuleMemory{ThreadID: 61, Length: 8}, 24, 24 + 8},
		{&ListThreads{ThreadID: 62}, 8, 16 + 8*MaxThreadIDs},
		{&GetLinkMap{ThreadID: 58, Dynamic: 0x403e10, DynamicSize: 0x1d0, MaxLength: 8192, RDebug: 0x7f0000003118}, 32, 8192},
		{&SetRegisterSet{ThreadID: 53, Set: RegSetGeneral, Data: data}, 16 + len(data), 8},
		{&CallFunction{ThreadID: 54, Entry: 0x401136, TOC: 0x10028000, TimeoutMS: 5000, Return: CallFloat64,
			Args: []CallArg{{CallInt, 7}, {CallFloat64, 0x4004000000000000}, {CallData, 0}}, Data: []byte("abc\x00")},
			32 + 3*16 + 4, 32},
		{&StopProcess{ThreadID: 54}, 8, 16},
		{&StopProcess{ThreadID: 56, Flags: StopResendOnly}, 8, 16},
		{&SetTrapCondition{ThreadID: 55, Address: 0x401136, Bias: 0x555555554000, Hits: 7, Site: data}, 40 + len(data), 16},
		{&StepRange{ThreadID: 57, MaxSteps: 4096, Lo: 0x401136, Hi: 0x401150}, 24, 8},
	}
}

func ackSamples() []ackSample {
	data := []byte{0xa, 0xb, 0xc, 0xd, 0xe}
	bare := func(a Ack) ackSample { return ackSample{a, 8} }
	return []ackSample{
		{&GetSpecialRegsAck{ThreadID: 1, Regs: sampleSRegs}, 80},
		{&GetGeneralRegsAck{ThreadID: 2, GPR: sampleGPR}, 264},
		{&GetFloatRegsAck{ThreadID: 3, FPR: sampleFPR}, 1032},
		{&GetDebugRegsAck{ThreadID: 4, Regs: sampleDRegs}, 112},
		{&GetMemoryAck{ThreadID: 5, Addr: 0x1000, Length: uint32(len(data)), Data: data}, 24 + len(data)},
		{&GetThreadListAck{ThreadID: 6, Threads: []ThreadEntry{{100, false}, {101, true}, {102, false}}}, 8208},
		{&GetAuxVectorsAck{ThreadID: 7, Words: []uint64{3, 0x10000040, 9, 0x10000200, 0, 0}}, 272},
		{&GetProcessDataAck{ThreadID: 8, Rank: 3, TGID: 4242, ACoord: 1, BCoord: 2, CCoord: 3, DCoord: 4, ECoord: 5,
			TCoord: 6, SharedMemoryStart: 0x100, SharedMemoryEnd: 0x200, PersistMemoryStart: 0x300,
			PersistMemoryEnd: 0x400, HeapStart: 0x500, HeapEnd: 0x600, HeapBreak: 0x550, MmapStart: 0x700,
			MmapEnd: 0x800, JobTime: Timeval{Sec: 1700000000, Usec: 123456}}, 128},
		{&GetThreadDataAck{ThreadID: 9, Core: 3, HWThread: 2, State: ThreadFutexWait, ToolState: ToolHoldSuspend,
			SpecState: SpecTransactionalMemory, GuardStart: 1, GuardEnd: 2, StackStart: 3, StackCurrent: 4,
			Frames: []StackFrame{{0x7ff0, 0x1000010}, {0x7ff8, 0x1000020}}}, 6472},
		{&GetPreferencesAck{ThreadID: 10, BreakpointMode: FastBreakDisable, WatchpointMode: FastWatchEnable,
			DACMode: TrapOnDAC}, 24},
		{&GetFilenamesAck{ThreadID: 11, Names: []string{"/a", "/persist/b.dat"}}, 32784},
		{&GetFileStatDataAck{ThreadID: 12, Stat: Stat64{Dev: 1, Ino: 2, Nlink: 3, Mode: 0o100644, UID: 4, GID: 5,
			Rdev: 6, Size: 7, Blksize: 8, Blocks: 9, Atim: Timespec{10, 11}, Mtim: Timespec{12, 13},
			Ctim: Timespec{14, 15}}}, 152},
		{&GetFileContentsAck{ThreadID: 13, Data: data}, 16 + len(data)},
		bare(&SetGeneralRegAck{ThreadID: 14}),
		bare(&SetFloatRegAck{ThreadID: 15}),
		bare(&SetDebugRegAck{ThreadID: 16}),
		{&SetMemoryAck{ThreadID: 17, Addr: 0x2000, Length: 11}, 24},
		bare(&HoldThreadAck{ThreadID: 18}),
		bare(&ReleaseThreadAck{ThreadID: 19}),
		bare(&InstallTrapHandlerAck{ThreadID: 20}),
		{&AllocateMemoryAck{ThreadID: 21, Addr: 0x4000000}, 16},
		bare(&SendSignalAck{ThreadID: 22}),
		bare(&ContinueProcessAck{ThreadID: 23}),
		bare(&StepThreadAck{ThreadID: 24}),
		bare(&SetBreakpointAck{ThreadID: 25}),
		bare(&ResetBreakpointAck{ThreadID: 26}),
		{&SetWatchpointAck{ThreadID: 27, Watch: [2]WatchEntry{{0x3000, 8, WatchWrite}, {}}}, 40},
		{&ResetWatchpointAck{ThreadID: 28, Watch: [2]WatchEntry{{}, {0x5000, 4, WatchRead}}}, 40},
		bare(&RemoveTrapHandlerAck{ThreadID: 29}),
		bare(&SetPreferencesAck{ThreadID: 30}),
		bare(&FreeMemoryAck{ThreadID: 31}),
		bare(&SetSpecialRegAck{ThreadID: 32}),
		bare(&SetGeneralRegsAck{ThreadID: 33}),
		bare(&SetFloatRegsAck{ThreadID: 34}),
		bare(&SetDebugRegsAck{ThreadID: 35}),
		bare(&SetSpecialRegsAck{ThreadID: 36}),
		bare(&ReleaseControlAck{ThreadID: 37}),
		bare(&SetContinuationSignalAck{ThreadID: 38}),
		bare(&SendSignalToProcessAck{ThreadID: 39}),
		{&GetTargetInfoAck{ThreadID: 40, Machine: elf.EM_X86_64, ByteOrder: elf.ELFDATA2LSB, PtrSize: 8,
			PageSize: 4096, Pid: 4242, Exe: "/usr/bin/app"}, 24 + len("/usr/bin/app")},
		{&GetRegisterSetAck{ThreadID: 41, Set: RegSetGeneral, Data: data}, 16 + len(data)},
		{&GetTracebackAck{ThreadID: 42, Frames: []TraceFrame{{0x401000, 0x7ffe0010}, {0x401234, 0x7ffe0040}}}, 16 + 32},
		{&GetLinkMapAck{ThreadID: 48, RDebug: 0x7f0000003118, Brk: 0x7f0000001000, State: 1, Entries: []LinkMapEntry{
			{Bias: 0x555555554000, Node: 0x7f00000042c0}, {Bias: 0x7f0000100000, Node: 0x7f0000004800, Name: "/lib/libm.so.6"},
			{Bias: 0x7f0000200000, Node: 0x7f0000005000, Name: "/lib/libc.so.6!!"}}}, 32 + 24 + (24 + 16) + (24 + 16)},
		bare(&SetRegisterSetAck{ThreadID: 43}),
		{&EvaluateValueAck{ThreadID: 49, Text: "65 'A'"}, 16 + len("65 'A'")},
		{&GetModuleMemoryAck{ThreadID: 50, Addr: 0x7f0000201000, Length: 4, Data: []byte{1, 2, 3, 4}}, 24 + 4},
		{&ListThreadsAck{ThreadID: 51, Threads: []ThreadEntry{{TID: 4242}, {TID: 4243, CommThread: true}}}, 16 + 2*8},
		{&CallFunctionAck{ThreadID: 44, Outcome: CallSignaled, Signal: 11, Value: 0, PC: 0x401140}, 32},
		{&StopProcessAck{ThreadID: 44, Stopping: true}, 16},
		{&StopProcessAck{ThreadID: 45}, 16},
		{&SetTrapConditionAck{ThreadID: 46, Hits: 12}, 16},
		bare(&StepRangeAck{ThreadID: 47}),
	}
}

package cdti

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strconv"
)

// ExtensionVersion is the version of this package's extensions (Hello, the extension commands),
// sent in Hello and HelloAck. Version 2 proves the session token by challenge and response
// instead of sending it; a tool of version 3 accepts Exits (a Termination Notify of several
// ranks).
const ExtensionVersion = 3

// Extension command types: numbers BG/Q never assigned, so that a real CNK answers CmdInval.
// Query extensions are 1101…1199, update extensions 1201…1299; ack = command + 1.
const (
	TypeGetTargetInfo     CommandType = 1101
	TypeGetTargetInfoAck  CommandType = 1102
	TypeGetRegisterSet    CommandType = 1103
	TypeGetRegisterSetAck CommandType = 1104
	TypeGetTraceback      CommandType = 1105
	TypeGetTracebackAck   CommandType = 1106
	TypeSetRegisterSet    CommandType = 1201
	TypeSetRegisterSetAck CommandType = 1202
)

// Limits of the extensions.
const (
	MaxTokenSize            = 1024  // bytes of a session token
	NonceSize               = 32    // bytes of a Hello or HelloAck nonce
	maxProofSize            = 64    // bytes of a Hello or HelloAck proof (HelloProof makes 32)
	MaxNodeNameSize         = 1024  // bytes of HelloAck's node name
	MaxExePathSize          = 4096  // bytes of GetTargetInfoAck's executable path
	MaxRegisterSetSize      = 32768 // bytes of one register set
	DefaultRegisterSetSize  = 4096  // GetRegisterSet's bound when MaxLength is 0
	MaxTracebackFrames      = 4000  // frames GetTraceback may ask for
	DefaultTracebackFrames  = 400   // GetTraceback's bound when MaxFrames is 0
	getTargetInfoAckSize    = 24    // + the path
	registerSetHeaderSize   = 16    // GetRegisterSetAck and SetRegisterSet: data at +16
	getTracebackAckBaseSize = 16    // + 16 per frame
)

// RegisterSet names an architecture-native register set.
type RegisterSet uint32

const (
	// RegSetGeneral: the general registers as the OS lays them out (x86_64 user_regs_struct,
	// ppc64 pt_regs), in the target's byte order.
	RegSetGeneral RegisterSet = 1
	// RegSetFloat: the floating-point registers (x86_64 user_fpregs_struct, ppc64 the FPRs
	// and FPSCR as PTRACE_GETFPREGS returns them), in the target's byte order.
	RegSetFloat RegisterSet = 2
)

func (s RegisterSet) String() string {
	switch s {
	case RegSetGeneral:
		return "general"
	case RegSetFloat:
		return "float"
	}
	return "RegisterSet(" + strconv.Itoa(int(s)) + ")"
}

// GetTargetInfo asks what the target process is: machine, byte order, pid, executable.
type GetTargetInfo struct{ ThreadID uint32 }

func (c *GetTargetInfo) CommandType() CommandType { return TypeGetTargetInfo }
func (c *GetTargetInfo) Thread() uint32           { return c.ThreadID }
func (c *GetTargetInfo) EncodedSize() int         { return 8 }
func (c *GetTargetInfo) AckSize() int             { return getTargetInfoAckSize + MaxExePathSize }
func (c *GetTargetInfo) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

// GetTargetInfoAck answers GetTargetInfo. Layout: machine uint16 @8, byte order uint8 @10
// (ELFDATA2LSB 1, ELFDATA2MSB 2), pointer size uint8 @11, page size uint32 @12, pid uint32
// @16, path length uint32 @20, path @24.
type GetTargetInfoAck struct {
	ThreadID  uint32
	Machine   elf.Machine // ELF e_machine (EM_X86_64, EM_PPC64, ...)
	ByteOrder elf.Data    // elf.ELFDATA2LSB or elf.ELFDATA2MSB
	PtrSize   uint8       // bytes in a pointer
	PageSize  uint32
	Pid       uint32 // OS process id (under an emulator: the emulator's pid, or 0)
	Exe       string // absolute path of the executable; at most MaxExePathSize bytes are sent
}

func (a *GetTargetInfoAck) CommandType() CommandType { return TypeGetTargetInfoAck }
func (a *GetTargetInfoAck) Thread() uint32           { return a.ThreadID }
func (a *GetTargetInfoAck) exe() string              { return a.Exe[:min(len(a.Exe), MaxExePathSize)] }
func (a *GetTargetInfoAck) EncodedSize() int         { return getTargetInfoAckSize + len(a.exe()) }
func (a *GetTargetInfoAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint16(b[8:], uint16(a.Machine))
	b[10] = byte(a.ByteOrder)
	b[11] = a.PtrSize
	be.PutUint32(b[12:], a.PageSize)
	be.PutUint32(b[16:], a.Pid)
	be.PutUint32(b[20:], uint32(len(a.exe())))
	copy(b[24:], a.exe())
}

// Order returns the target's byte order (big-endian unless ByteOrder says little).
func (a *GetTargetInfoAck) Order() binary.ByteOrder {
	if a.ByteOrder == elf.ELFDATA2LSB {
		return binary.LittleEndian
	}
	return binary.BigEndian
}

func decGetTargetInfoAck(b []byte) (Ack, error) {
	if err := need(TypeGetTargetInfoAck, b, getTargetInfoAckSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[20:])
	if uint64(n) > uint64(len(b)-getTargetInfoAckSize) {
		return nil, fmt.Errorf("%v: path of %d bytes but payload holds %d", TypeGetTargetInfoAck, n,
			len(b)-getTargetInfoAckSize)
	}
	return &GetTargetInfoAck{ThreadID: be.Uint32(b), Machine: elf.Machine(be.Uint16(b[8:])),
		ByteOrder: elf.Data(b[10]), PtrSize: b[11], PageSize: be.Uint32(b[12:]), Pid: be.Uint32(b[16:]),
		Exe: string(b[24 : 24+n])}, nil
}

// GetRegisterSet reads one architecture-native register set of a thread. MaxLength bounds the
// ack (0: DefaultRegisterSetSize); a larger set is answered with CmdLngthErr.
type GetRegisterSet struct {
	ThreadID  uint32
	Set       RegisterSet
	MaxLength uint32
}

func (c *GetRegisterSet) CommandType() CommandType { return TypeGetRegisterSet }
func (c *GetRegisterSet) Thread() uint32           { return c.ThreadID }
func (c *GetRegisterSet) EncodedSize() int         { return 16 }
func (c *GetRegisterSet) AckSize() int             { return registerSetHeaderSize + int(c.Limit()) }
func (c *GetRegisterSet) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[8:], uint32(c.Set))
	be.PutUint32(b[12:], c.MaxLength)
}

// Limit is the effective bound on the register set's size.
func (c *GetRegisterSet) Limit() uint32 {
	if c.MaxLength == 0 {
		return DefaultRegisterSetSize
	}
	return min(c.MaxLength, MaxRegisterSetSize)
}

func (c *GetRegisterSet) validate() error {
	if c.MaxLength > MaxRegisterSetSize {
		return fmt.Errorf("cdti: GetRegisterSet MaxLength %d (limit %d)", c.MaxLength, MaxRegisterSetSize)
	}
	return nil
}

func decGetRegisterSet(b []byte) (Command, error) {
	if err := need(TypeGetRegisterSet, b, 16); err != nil {
		return nil, err
	}
	return &GetRegisterSet{ThreadID: be.Uint32(b), Set: RegisterSet(be.Uint32(b[8:])), MaxLength: be.Uint32(b[12:])}, nil
}

// GetRegisterSetAck answers GetRegisterSet: set uint32 @8, length uint32 @12, data @16.
type GetRegisterSetAck struct {
	ThreadID uint32
	Set      RegisterSet
	Data     []byte // the set in the target's native layout and byte order
}

func (a *GetRegisterSetAck) CommandType() CommandType { return TypeGetRegisterSetAck }
func (a *GetRegisterSetAck) Thread() uint32           { return a.ThreadID }
func (a *GetRegisterSetAck) EncodedSize() int         { return registerSetHeaderSize + len(a.Data) }
func (a *GetRegisterSetAck) Encode(b []byte)          { putRegisterSet(b, a.ThreadID, a.Set, a.Data) }

func putRegisterSet(b []byte, tid uint32, set RegisterSet, data []byte) {
	be.PutUint32(b, tid)
	be.PutUint32(b[8:], uint32(set))
	be.PutUint32(b[12:], uint32(len(data)))
	copy(b[16:], data)
}

func getRegisterSet(t CommandType, b []byte) (uint32, RegisterSet, []byte, error) {
	if err := need(t, b, registerSetHeaderSize); err != nil {
		return 0, 0, nil, err
	}
	n := be.Uint32(b[12:])
	if uint64(n) > uint64(len(b)-registerSetHeaderSize) {
		return 0, 0, nil, fmt.Errorf("%v: length %d but payload holds %d", t, n, len(b)-registerSetHeaderSize)
	}
	return be.Uint32(b), RegisterSet(be.Uint32(b[8:])), b[16 : 16+n], nil
}

func decGetRegisterSetAck(b []byte) (Ack, error) {
	tid, set, data, err := getRegisterSet(TypeGetRegisterSetAck, b)
	if err != nil {
		return nil, err
	}
	return &GetRegisterSetAck{ThreadID: tid, Set: set, Data: data}, nil
}

// SetRegisterSet replaces one architecture-native register set of a thread (same layout as
// GetRegisterSetAck). Its ack is a bare SetRegisterSetAck.
type SetRegisterSet struct {
	ThreadID uint32
	Set      RegisterSet
	Data     []byte
}

func (c *SetRegisterSet) CommandType() CommandType { return TypeSetRegisterSet }
func (c *SetRegisterSet) Thread() uint32           { return c.ThreadID }
func (c *SetRegisterSet) EncodedSize() int         { return registerSetHeaderSize + len(c.Data) }
func (c *SetRegisterSet) AckSize() int             { return 8 }
func (c *SetRegisterSet) Encode(b []byte)          { putRegisterSet(b, c.ThreadID, c.Set, c.Data) }
func (c *SetRegisterSet) validate() error {
	if len(c.Data) > MaxRegisterSetSize {
		return fmt.Errorf("cdti: SetRegisterSet of %d bytes (limit %d)", len(c.Data), MaxRegisterSetSize)
	}
	return nil
}

func decSetRegisterSet(b []byte) (Command, error) {
	tid, set, data, err := getRegisterSet(TypeSetRegisterSet, b)
	if err != nil {
		return nil, err
	}
	return &SetRegisterSet{ThreadID: tid, Set: set, Data: data}, nil
}

// SetRegisterSetAck answers SetRegisterSet.
type SetRegisterSetAck struct{ ThreadID uint32 }

func (a *SetRegisterSetAck) CommandType() CommandType { return TypeSetRegisterSetAck }
func (a *SetRegisterSetAck) Thread() uint32           { return a.ThreadID }
func (a *SetRegisterSetAck) EncodedSize() int         { return 8 }
func (a *SetRegisterSetAck) Encode(b []byte)          { be.PutUint32(b, a.ThreadID) }

// GetTraceback asks the agent to unwind a stopped thread's stack, up to MaxFrames frames
// (0: DefaultTracebackFrames).
type GetTraceback struct {
	ThreadID  uint32
	MaxFrames uint32
}

func (c *GetTraceback) CommandType() CommandType { return TypeGetTraceback }
func (c *GetTraceback) Thread() uint32           { return c.ThreadID }
func (c *GetTraceback) EncodedSize() int         { return 16 }
func (c *GetTraceback) AckSize() int             { return getTracebackAckBaseSize + 16*int(c.Limit()) }
func (c *GetTraceback) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint32(b[8:], c.MaxFrames)
}

// Limit is the effective bound on the number of frames.
func (c *GetTraceback) Limit() uint32 {
	if c.MaxFrames == 0 {
		return DefaultTracebackFrames
	}
	return min(c.MaxFrames, MaxTracebackFrames)
}

func (c *GetTraceback) validate() error {
	if c.MaxFrames > MaxTracebackFrames {
		return fmt.Errorf("cdti: GetTraceback of %d frames (limit %d)", c.MaxFrames, MaxTracebackFrames)
	}
	return nil
}

// TraceFrame is one frame of a GetTracebackAck, innermost first.
type TraceFrame struct {
	// PC is the program counter of frame 0 and the return address of every outer frame.
	PC uint64
	// CFA is the frame's canonical frame address (DWARF CFA: the caller's stack pointer before
	// the call) or, where the agent walks a back chain, the frame address.
	CFA uint64
}

// GetTracebackAck answers GetTraceback: number of frames uint32 @8, frames of 16 bytes
// (PC, CFA) @16.
type GetTracebackAck struct {
	ThreadID uint32
	Frames   []TraceFrame
}

func (a *GetTracebackAck) CommandType() CommandType { return TypeGetTracebackAck }
func (a *GetTracebackAck) Thread() uint32           { return a.ThreadID }
func (a *GetTracebackAck) frames() []TraceFrame {
	return a.Frames[:min(len(a.Frames), MaxTracebackFrames)]
}
func (a *GetTracebackAck) EncodedSize() int {
	return getTracebackAckBaseSize + 16*len(a.frames())
}
func (a *GetTracebackAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	fs := a.frames()
	be.PutUint32(b[8:], uint32(len(fs)))
	for i, f := range fs {
		be.PutUint64(b[16+16*i:], f.PC)
		be.PutUint64(b[24+16*i:], f.CFA)
	}
}

func decGetTracebackAck(b []byte) (Ack, error) {
	if err := need(TypeGetTracebackAck, b, getTracebackAckBaseSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[8:])
	if uint64(n) > uint64((len(b)-getTracebackAckBaseSize)/16) {
		return nil, fmt.Errorf("%v: %d frames but payload holds %d bytes", TypeGetTracebackAck, n, len(b))
	}
	a := &GetTracebackAck{ThreadID: be.Uint32(b), Frames: list[TraceFrame](int(n))}
	for i := range a.Frames {
		a.Frames[i] = TraceFrame{PC: be.Uint64(b[16+16*i:]), CFA: be.Uint64(b[24+16*i:])}
	}
	return a, nil
}

// InstructionSize is the number of instruction bytes that SetBreakpoint.Instruction and
// ResetBreakpoint.Instruction carry on a target of machine m (see the package documentation):
// 1 on x86, 4 on Power and other fixed-width machines.
func InstructionSize(m elf.Machine) int {
	switch m {
	case elf.EM_X86_64, elf.EM_386:
		return 1
	}
	return 4
}

// InstructionBytes returns the memory image of a breakpoint Instruction value on machine m:
// its low-order InstructionSize(m) bytes in the target's byte order.
func InstructionBytes(m elf.Machine, order binary.ByteOrder, insn uint32) []byte {
	var w [4]byte
	n := InstructionSize(m)
	if order == binary.BigEndian {
		be.PutUint32(w[:], insn)
		return append([]byte(nil), w[4-n:]...)
	}
	binary.LittleEndian.PutUint32(w[:], insn)
	return append([]byte(nil), w[:n]...)
}

// InstructionValue is the inverse of InstructionBytes: the Instruction value of the memory
// image b (1 to 4 bytes) in the target's byte order.
func InstructionValue(order binary.ByteOrder, b []byte) uint32 {
	var v uint32
	for i := range min(len(b), 4) {
		if order == binary.BigEndian {
			v = v<<8 | uint32(b[i])
		} else {
			v |= uint32(b[i]) << (8 * i)
		}
	}
	return v
}

func init() {
	register(TypeGetTargetInfo, "GetTargetInfo", MsgQuery, true,
		threadDecoder(TypeGetTargetInfo, func(t uint32) Command { return &GetTargetInfo{t} }), decGetTargetInfoAck)
	register(TypeGetRegisterSet, "GetRegisterSet", MsgQuery, true, decGetRegisterSet, decGetRegisterSetAck)
	register(TypeGetTraceback, "GetTraceback", MsgQuery, true,
		decTidU32(TypeGetTraceback, func(t, v uint32) Command { return &GetTraceback{t, v} }), decGetTracebackAck)
	register(TypeSetRegisterSet, "SetRegisterSet", MsgUpdate, true, decSetRegisterSet,
		threadDecoder(TypeSetRegisterSetAck, func(t uint32) Ack { return &SetRegisterSetAck{t} }))
}

// Hello is the extension message that opens every connection to an hpcdap agent. It proves
// that the tool holds the session token without sending it (see HelloProof): the first Hello
// carries the tool's Nonce, the agent answers with a HelloAck carrying its own Nonce and its
// Proof, and the second Hello carries the tool's Proof. Layout: extension version uint32 @40,
// nonce length uint16 @44, proof length uint16 @46, nonce @48, proof after it, padded to a
// multiple of 8.
type Hello struct {
	Header
	ExtVersion uint32
	Nonce      []byte // first Hello: NonceSize random bytes
	Proof      []byte // second Hello: HelloProof(token, HelloRoleTool, agent's nonce, tool's nonce)
}

// HelloAck answers Hello. To the first Hello it carries the agent's Nonce and Proof, which the
// tool checks before it proves anything itself, so that a listener without the token learns
// nothing; to the second it carries the agent's node name, or ReturnCode ToolAuthorityError
// when the proof was wrong (the agent then closes the connection). Layout: extension version
// uint32 @40, node name length uint16 @44, nonce length uint8 @46, proof length uint8 @47,
// name @48, nonce and proof after it, padded to a multiple of 8.
type HelloAck struct {
	Header
	ExtVersion uint32
	Node       string // the agent's node name; at most MaxNodeNameSize bytes
	Nonce      []byte // answer to the first Hello: NonceSize random bytes
	Proof      []byte // answer to the first Hello: HelloProof(token, HelloRoleAgent, tool's nonce, agent's nonce)
}

// Roles of HelloProof: each side proves under its own, so that a proof cannot be reflected.
const (
	HelloRoleTool  = "hpcdap tool"
	HelloRoleAgent = "hpcdap agent"
)

// HelloProof is what a side of a hello sends to show it holds the session token: HMAC-SHA256
// keyed by the token over its role, the peer's nonce (the challenge it answers) and its own
// nonce. The management plane's hello uses it too.
func HelloProof(token []byte, role string, challenge, own []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(role))
	m.Write([]byte{0})
	m.Write(challenge)
	m.Write(own)
	return m.Sum(nil)
}

// NewNonce returns NonceSize random bytes.
func NewNonce() []byte {
	b := make([]byte, NonceSize)
	if _, err := rand.Read(b); err != nil {
		panic("cdti: no randomness for a nonce: " + err.Error())
	}
	return b
}

func (m *Hello) MessageType() MessageType { return MsgHello }
func (m *Hello) encodedSize(bool) (int, error) {
	if len(m.Nonce) > NonceSize || len(m.Proof) > maxProofSize {
		return 0, fmt.Errorf("cdti: encode Hello: nonce of %d bytes, proof of %d (limits %d, %d)", len(m.Nonce), len(m.Proof), NonceSize, maxProofSize)
	}
	return 48 + round8(len(m.Nonce)+len(m.Proof)), nil
}
func (m *Hello) encodeBody(b []byte) {
	be.PutUint32(b[40:], m.ExtVersion)
	be.PutUint16(b[44:], uint16(len(m.Nonce)))
	be.PutUint16(b[46:], uint16(len(m.Proof)))
	copy(b[48:], m.Nonce)
	copy(b[48+len(m.Nonce):], m.Proof)
}

func (m *HelloAck) MessageType() MessageType { return MsgHelloAck }
func (m *HelloAck) encodedSize(bool) (int, error) {
	if len(m.Node) > MaxNodeNameSize || len(m.Nonce) > NonceSize || len(m.Proof) > maxProofSize {
		return 0, fmt.Errorf("cdti: encode HelloAck: node name of %d bytes, nonce of %d, proof of %d (limits %d, %d, %d)",
			len(m.Node), len(m.Nonce), len(m.Proof), MaxNodeNameSize, NonceSize, maxProofSize)
	}
	return 48 + round8(len(m.Node)+len(m.Nonce)+len(m.Proof)), nil
}
func (m *HelloAck) encodeBody(b []byte) {
	be.PutUint32(b[40:], m.ExtVersion)
	be.PutUint16(b[44:], uint16(len(m.Node)))
	b[46], b[47] = byte(len(m.Nonce)), byte(len(m.Proof))
	n := copy(b[48:], m.Node)
	n += copy(b[48+n:], m.Nonce)
	copy(b[48+n:], m.Proof)
}

// helloFields reads the strings of a Hello or HelloAck: sizes[i] bytes each from @48, in
// order, each within its limit.
func helloFields(h Header, b []byte, sizes, limits []int) ([][]byte, error) {
	out := make([][]byte, len(sizes))
	at := 48
	for i, n := range sizes {
		if n > limits[i] || at+n > len(b) {
			return nil, malformed(h.Type, "field of %d bytes at %d in a %d-byte message (limit %d)", n, at, len(b), limits[i])
		}
		if n > 0 {
			out[i] = b[at : at+n]
		}
		at += n
	}
	return out, nil
}

func decHello(h Header, b []byte) (Message, error) {
	if err := needMsg(h, b, 48); err != nil {
		return nil, err
	}
	f, err := helloFields(h, b, []int{int(be.Uint16(b[44:])), int(be.Uint16(b[46:]))}, []int{NonceSize, maxProofSize})
	if err != nil {
		return nil, err
	}
	return &Hello{Header: h, ExtVersion: be.Uint32(b[40:]), Nonce: f[0], Proof: f[1]}, nil
}

func decHelloAck(h Header, b []byte) (Message, error) {
	if h.ReturnCode != Success && len(b) < 48 {
		return &HelloAck{Header: h}, nil
	}
	if err := needMsg(h, b, 48); err != nil {
		return nil, err
	}
	f, err := helloFields(h, b, []int{int(be.Uint16(b[44:])), int(b[46]), int(b[47])}, []int{MaxNodeNameSize, NonceSize, maxProofSize})
	if err != nil {
		return nil, err
	}
	return &HelloAck{Header: h, ExtVersion: be.Uint32(b[40:]), Node: string(f[0]), Nonce: f[1], Proof: f[2]}, nil
}

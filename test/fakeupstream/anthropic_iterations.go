package fakeupstream

import (
	"strings"
)

// Anthropic's server-side iterations: with server-side compaction (context management) or an
// advisor tool, one request runs several sampling iterations, and the answer's usage lists
// them in usage.iterations. The top-level counts then cover only part of what ran (the last
// iteration; with an advisor, the executor's iterations), as recorded answers show, while
// Anthropic bills every iteration. Prompt triggers in the last user text ask for them.
const (
	// AnthropicCompactionTrigger: compaction runs before the answer: a compaction block comes
	// first, and the iterations are the compaction's (the prompt's tokens in, of which
	// AnthropicCompactionCacheRead more read from cache, AnthropicCompactionOutput out) and the
	// message's (AnthropicCompactedInput in, the answer out). Top-level: the message's only.
	// Streamed, message_start reports the compaction's input, as the API does.
	AnthropicCompactionTrigger = "#compaction"
	// AnthropicAdvisorTrigger followed by a model name ("#advisor=claude-opus-4-8"): the
	// executor calls an advisor running on that model, then answers. Iterations: the
	// executor's call (the prompt in, AnthropicAdvisorCallOutput out), the advisor's
	// (AnthropicAdvisorInput, AnthropicAdvisorOutput, naming its model), the executor's answer
	// (AnthropicAdvisorResumeInput in, the answer out). Top-level: the executor's two.
	AnthropicAdvisorTrigger = "#advisor="
)

// Token counts of the iterations (those of recorded answers).
const (
	AnthropicCompactionCacheRead = 55096
	AnthropicCompactionOutput    = 83
	AnthropicCompactedInput      = 181
	AnthropicAdvisorCallOutput   = 110
	AnthropicAdvisorInput        = 2518
	AnthropicAdvisorOutput       = 22
	AnthropicAdvisorResumeInput  = 1262
)

// anthropicIteration is one element of usage.iterations.
type anthropicIteration struct {
	Type  string `json:"type"`
	Model string `json:"model,omitempty"`
	anthropicCounts
}

// serverSide is what the triggers of a request add to its answer: the content blocks before
// the answer's, the usage message_start reports, and the final usage with its iterations.
type serverSide struct {
	blocks []map[string]any
	start  anthropicUsage
	final  anthropicUsage
}

// anthropicServerSide works out the iterations prompt asks for around an answer whose own
// counts are u (the prompt in, the answer out); ok is false when it asks for none.
func anthropicServerSide(prompt string, u anthropicUsage) (ss serverSide, ok bool) {
	switch {
	case strings.Contains(prompt, AnthropicCompactionTrigger):
		compaction := anthropicCounts{InputTokens: u.InputTokens, CacheReadInputTokens: AnthropicCompactionCacheRead, OutputTokens: AnthropicCompactionOutput}
		message := anthropicCounts{InputTokens: AnthropicCompactedInput, OutputTokens: u.OutputTokens}
		ss.blocks = []map[string]any{{"type": "compaction", "content": "Summary of the conversation so far: " + prompt}}
		ss.start = anthropicUsage{anthropicCounts: compaction}
		ss.start.OutputTokens = 1
		ss.final = anthropicUsage{anthropicCounts: message, Iterations: []anthropicIteration{{Type: "compaction", anthropicCounts: compaction}, {Type: "message", anthropicCounts: message}}}
		return ss, true
	case strings.Contains(prompt, AnthropicAdvisorTrigger):
		model, _, _ := strings.Cut(prompt[strings.Index(prompt, AnthropicAdvisorTrigger)+len(AnthropicAdvisorTrigger):], " ")
		call := anthropicCounts{InputTokens: u.InputTokens, OutputTokens: AnthropicAdvisorCallOutput}
		advice := anthropicCounts{InputTokens: AnthropicAdvisorInput, OutputTokens: AnthropicAdvisorOutput}
		answer := anthropicCounts{InputTokens: AnthropicAdvisorResumeInput, OutputTokens: u.OutputTokens}
		ss.blocks = []map[string]any{
			{"type": "server_tool_use", "id": "srvtoolu_fake", "name": "advisor", "input": map[string]any{}},
			{"type": "advisor_tool_result", "tool_use_id": "srvtoolu_fake", "content": map[string]any{"type": "advisor_result", "text": "Answer directly."}},
		}
		ss.start = anthropicUsage{anthropicCounts: anthropicCounts{InputTokens: u.InputTokens, OutputTokens: 1}}
		ss.final = anthropicUsage{
			anthropicCounts: anthropicCounts{InputTokens: call.InputTokens + answer.InputTokens, OutputTokens: call.OutputTokens + answer.OutputTokens},
			Iterations: []anthropicIteration{{Type: "message", anthropicCounts: call}, {Type: "advisor_message", Model: model, anthropicCounts: advice},
				{Type: "message", anthropicCounts: answer}},
		}
		return ss, true
	}
	return ss, false
}

// anthropicLeadingBlocks streams the blocks server-side iterations put before the answer: a
// compaction block as the API streams it (content null, then one compaction_delta), others
// whole in their content_block_start; false means the client is gone.
func (s *Server) anthropicLeadingBlocks(event func(name string, data any) bool, blocks []map[string]any) bool {
	for i, b := range blocks {
		start := b
		if b["type"] == "compaction" {
			start = map[string]any{"type": "compaction", "content": nil}
		}
		if !event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start}) {
			return false
		}
		if b["type"] == "compaction" && !event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
			"delta": map[string]any{"type": "compaction_delta", "content": b["content"]}}) {
			return false
		}
		if !event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}) {
			return false
		}
	}
	return true
}

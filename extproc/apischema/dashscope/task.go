// Package dashscope declares the answers of Alibaba Model Studio's (DashScope's) generation APIs
// as far as the gateway reads them: the asynchronous task (create and query) and the synchronous
// generation, for videos and images alike. Shapes only.
package dashscope

import "encoding/json"

// Answer is every answer of the task and generation APIs: an error envelope (HTTP 4xx and
// 5xx: code and message at the top), or output and usage.
type Answer struct {
	Error
	Output Output `json:"output"`
	Usage  Usage  `json:"usage"`
}

// Error is DashScope's error envelope.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Output is a task's state and results.
type Output struct {
	TaskID  string `json:"task_id"`
	Status  string `json:"task_status"` // PENDING | RUNNING | SUCCEEDED | FAILED | CANCELED | UNKNOWN
	EndTime string `json:"end_time"`    // Beijing time without a zone: "2025-02-20 18:45:52.262"
	// Code and Message say why a task failed.
	Code    string `json:"code"`
	Message string `json:"message"`
	// VideoURL is a video task's result.
	VideoURL string `json:"video_url"`
	// Results (text2image) and Choices (the messages APIs) are an image task's results.
	Results []struct {
		URL     string `json:"url"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"results"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content []struct {
				Image string `json:"image"`
			} `json:"content"`
		} `json:"message"`
	} `json:"choices"`
}

// Usage is what a task is billed on: a video's duration, or the images made.
type Usage struct {
	Duration   json.Number `json:"duration"` // seconds of video
	ImageCount int64       `json:"image_count"`
	Width      int         `json:"width"`
	Height     int         `json:"height"`
	Size       string      `json:"size"` // W*H
}

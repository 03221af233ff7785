// What the SDK scripts run by the Go e2e suite share: their environment, and an OpenAI client
// for the gateway under test (no retries: a test sees every answer).
import OpenAI from 'openai';

export function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run this through the Go e2e suite`);
  return value;
}

export function gatewayClient() {
  return new OpenAI({ baseURL: env('TOLLWAY_BASE_URL'), apiKey: env('TOLLWAY_API_KEY'), maxRetries: 0 });
}

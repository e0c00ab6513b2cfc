// Prefixed NanoIDs (PROTOCOL.md §4.11) and the Configuration features of a client.

import { Feature } from "./messages";

/** `<prefix>_<21 URL-safe random characters>` (NanoID's format: 126 random bits, as
 * base64url). */
export function newId(prefix: string): string {
  const b64 = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(16))));
  return `${prefix}_${b64.slice(0, 21).replace(/\+/g, "-").replace(/\//g, "_")}`;
}

/** Features a client announces: streamed answers, and reasoning steps when shown. */
export function featuresFor(showReasoning: boolean): string[] {
  return showReasoning ? [Feature.Streaming, Feature.ReasoningStepDisplay] : [Feature.Streaming];
}

/** What the server's Configuration grants this participant of the reasoning. */
export type ReasoningLevel = "full" | "summary" | "encrypted" | "none";

/** The reasoning level a server's `features` list grants (DECISIONS.md "reasoning levels"). */
export function grantedLevel(features: readonly string[] | undefined): ReasoningLevel {
  const has = (f: string): boolean => !!features?.includes(f);
  if (has(Feature.ReasoningSteps)) return "full";
  if (has(Feature.ReasoningSummary)) return "summary";
  if (has(Feature.ReasoningEncrypted)) return "encrypted";
  return "none";
}

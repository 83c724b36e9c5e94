import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/** Custom search attributes on every Application workflow, so the Temporal UI can filter by app. */
export const appNamespaceKey = defineSearchAttributeKey('AppNamespace', SearchAttributeType.KEYWORD);
export const appNameKey = defineSearchAttributeKey('AppName', SearchAttributeType.KEYWORD);
export const appPhaseKey = defineSearchAttributeKey('AppPhase', SearchAttributeType.KEYWORD);

export const searchAttributeKeys = [appNamespaceKey, appNameKey, appPhaseKey] as const;

/** `--search-attribute Name=Keyword` flags for the Temporal dev server. */
export function searchAttributeFlags(): string[] {
  return searchAttributeKeys.map((k) => `--search-attribute=${k.name}=Keyword`);
}

// The part of react-dom/client these pages use (@types/react-dom is not installed).
declare module "react-dom/client" {
  import type { ReactNode } from "react";
  export function createRoot(container: Element): { render(node: ReactNode): void; unmount(): void };
}

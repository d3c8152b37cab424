import { useEffect, useRef, useState, type ReactNode } from 'react';

// Mounts its children only once they come near the viewport, so a page of a hundred charts
// draws only the ones on screen (and those scrolled to).
export function LazyMount({ height, children }: { height: number; children: ReactNode }) {
  const ref = useRef<HTMLDivElement>(null);
  const [visible, setVisible] = useState(false);
  useEffect(() => {
    const el = ref.current;
    if (!el || visible) return;
    const observer = new IntersectionObserver(
      (entries) => {
        if (entries.some((e) => e.isIntersecting)) setVisible(true);
      },
      { rootMargin: '200px' },
    );
    observer.observe(el);
    return () => observer.disconnect();
  }, [visible]);
  return (
    <div ref={ref} style={{ minHeight: visible ? undefined : height }}>
      {visible ? children : null}
    </div>
  );
}
